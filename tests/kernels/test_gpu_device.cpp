// GPU: the device query finds the CUDA device on the GPU machine, and what DeviceBuffer uploads is
// in device memory before any stream reads it (label `gpu`).
#include <QtTest>

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "kernels/cuda/common/device_buffer.h"
#include "kernels/device/device_info.h"

namespace {

// Uploads `rounds` small weights (48 KB: what the driver stages whole, so the copy call can return
// before its DMA) through `upload`, each read back at once on a non-blocking stream — the stream
// kind every op-set launches on — while another thread keeps the host-to-device copy engine busy.
// Returns how many read-backs differed from what was uploaded.
template <typename Upload>
int staleReadBacks(int rounds, Upload upload) {
  cudaStream_t reader = nullptr;
  if (cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking) != cudaSuccess) return -1;
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    constexpr size_t kBytes = size_t(32) << 20;
    qs::cuda::DeviceBuffer big(kBytes, "busy copies");
    std::vector<char> host(kBytes, 1);
    cudaStream_t s = nullptr;
    (void)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    while (!stop.load()) {
      (void)cudaMemcpyAsync(big.get(), host.data(), kBytes, cudaMemcpyHostToDevice, s);
      (void)cudaStreamSynchronize(s);
    }
    (void)cudaStreamDestroy(s);
  });
  constexpr size_t kWords = 12 * 1024;
  uint32_t* back = nullptr;
  (void)cudaMallocHost(&back, kWords * 4);
  int stale = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<uint32_t> v(kWords);
    for (size_t i = 0; i < kWords; ++i) v[i] = uint32_t(r) * 2654435761u + uint32_t(i);
    qs::cuda::DeviceBuffer b;
    upload(b, v);
    (void)cudaMemcpyAsync(back, b.get(), kWords * 4, cudaMemcpyDeviceToHost, reader);
    (void)cudaStreamSynchronize(reader);
    for (size_t i = 0; i < kWords; ++i)
      if (back[i] != v[i]) {
        ++stale;
        break;
      }
  }
  stop = true;
  busy.join();
  (void)cudaFreeHost(back);
  (void)cudaStreamDestroy(reader);
  return stale;
}

}  // namespace

class TestGpuDevice : public QObject {
  Q_OBJECT
 private slots:
  void findsADevice() {
    const qs::DeviceInfo info = qs::queryDevice();
    QVERIFY(info.cudaBuilt);
    QVERIFY2(info.cudaAvailable, info.unavailableReason.c_str());
    QVERIFY(info.computeMajor >= 8);
    QVERIFY(info.multiprocessors > 0);
    qInfo("%s", info.summary().c_str());
  }

  // DeviceBuffer::upload (how the GEMM op-set stores every weight) waits for the copy's DMA, so a
  // kernel on a non-blocking stream launched right after never reads the buffer's old contents.
  // The plain cudaMemcpy it used before is timed beside it for the record: it may return once the
  // bytes are staged, and its count of stale read-backs (machine- and load-dependent) is printed,
  // not asserted.
  void uploadsLandBeforeNonBlockingStreamsRead() {
    constexpr int kRounds = 3000;
    const int plain = staleReadBacks(kRounds, [](qs::cuda::DeviceBuffer& b, const std::vector<uint32_t>& v) {
      b.allocate(v.size() * 4, "plain copy");
      (void)cudaMemcpy(b.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice);
    });
    const int fenced = staleReadBacks(kRounds, [](qs::cuda::DeviceBuffer& b, const std::vector<uint32_t>& v) {
      b.upload(v, "upload");
    });
    qInfo("stale read-backs in %d rounds: plain cudaMemcpy %d, DeviceBuffer::upload %d", kRounds, plain, fenced);
    QCOMPARE(fenced, 0);
  }

  // The allocation poison (DeviceBuffer::setAllocationPoison, QS_POISON_DEVICE_ALLOCATIONS): on,
  // every byte of a fresh buffer, odd sizes included, reads back as the byte; a byte out of range
  // turns it off; off, allocations are left alone (and the setting reads back -1).
  void allocationPoisonFillsEveryByte() {
    using qs::cuda::DeviceBuffer;
    const int before = DeviceBuffer::allocationPoison();
    for (const int byte : {0x5A, 0x00, 0xFF}) {
      DeviceBuffer::setAllocationPoison(byte);
      QCOMPARE(DeviceBuffer::allocationPoison(), byte);
      for (const size_t bytes : {size_t(1), size_t(4099), size_t(3) << 20}) {
        DeviceBuffer b(bytes, "poisoned");
        std::vector<uint8_t> host(bytes, uint8_t(~byte));
        QCOMPARE(cudaMemcpy(host.data(), b.get(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        size_t wrong = 0;
        for (uint8_t v : host) wrong += v != uint8_t(byte);
        QVERIFY2(wrong == 0, qPrintable(QString("%1 of %2 bytes are not 0x%3").arg(wrong).arg(bytes).arg(byte, 2, 16, QChar('0'))));
      }
    }
    DeviceBuffer::setAllocationPoison(300);
    QCOMPARE(DeviceBuffer::allocationPoison(), -1);
    DeviceBuffer::setAllocationPoison(before);
  }
};

QTEST_GUILESS_MAIN(TestGpuDevice)
#include "test_gpu_device.moc"

// GPU: the device query finds the CUDA device on the GPU machine (label `gpu`).
#include <QtTest>

#include "kernels/device/device_info.h"

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
};

QTEST_GUILESS_MAIN(TestGpuDevice)
#include "test_gpu_device.moc"

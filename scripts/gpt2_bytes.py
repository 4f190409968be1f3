"""GPT-2's byte-level BPE alphabet: the reversible map of the 256 byte values to printable
characters that byte-level tokenizer.json files (and loadHfTokenizerJson) use. Shared by the
scripts that write such files (make_hostile_corpus2.py, gpu/make_synth_vocab.py)."""


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))

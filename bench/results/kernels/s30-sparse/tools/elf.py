import struct, sys
def text_sections(fn):
    b = open(fn, "rb").read()
    assert b[:4] == b"\x7fELF" and b[4] == 2
    shoff, = struct.unpack_from("<Q", b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    secs = []
    for i in range(shnum):
        o = shoff + i * shentsize
        name, typ, flags, addr, off, size = struct.unpack_from("<IIQQQQ", b, o)
        secs.append((name, off, size))
    stro = secs[shstrndx][1]
    out = {}
    for name, off, size in secs:
        n = b[stro + name: b.index(b"\0", stro + name)].decode()
        if n.startswith(".text."): out[n] = b[off: off + size]
    return out
if __name__ == "__main__":
    for k, v in text_sections(sys.argv[1]).items(): print(len(v), len(v) // 16, k[:120])

#!/usr/bin/env python3
"""Independent reader of TensorBoard event files, for trident's tests.

Parses the TFRecord framing (u64 length, u32 masked CRC32C of the length bytes, data,
u32 masked CRC32C of the data; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8, little
endian), checks both CRCs with its own CRC32C, and decodes each record's tensorflow.Event
protobuf by hand from the wire format (no protobuf module), accepting only the fields and
wire types of TensorFlow's event.proto / summary.proto that a scalar writer uses:
  Event         1 wall_time (fixed64 double), 2 step (varint int64),
                3 file_version (bytes), 5 summary (message)
  Summary       1 value (message, repeated)
  Summary.Value 1 tag (bytes), 2 simple_value (fixed32 float)
Anything else, a bad CRC, a truncated record or trailing bytes exits with status 1.

Output, one line per record (bit patterns in hex so a comparison can be exact):
  version <file_version> <wall_time bits>
  scalar <step> <tag as hex of its UTF-8, "-" when empty> <simple_value float32 bits> <wall_time bits>
`read_tfevents.py --self-test` checks the CRC32C against RFC 3720's vectors.
"""
import struct
import sys


def _make_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(c: int) -> int:
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


class Bad(Exception):
    pass


def varint(buf: bytes, pos: int):
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise Bad("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, pos
        if shift >= 70:
            raise Bad("varint too long")


def fields(buf: bytes):
    """Yields (field number, wire type, value) where value is int, or bytes for wire type 2."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = varint(buf, pos)
        elif wt == 1:
            if pos + 8 > len(buf):
                raise Bad("truncated fixed64")
            v = struct.unpack_from("<Q", buf, pos)[0]
            pos += 8
        elif wt == 5:
            if pos + 4 > len(buf):
                raise Bad("truncated fixed32")
            v = struct.unpack_from("<I", buf, pos)[0]
            pos += 4
        elif wt == 2:
            n, pos = varint(buf, pos)
            if pos + n > len(buf):
                raise Bad("truncated length-delimited field")
            v = buf[pos:pos + n]
            pos += n
        else:
            raise Bad("unsupported wire type %d" % wt)
        yield num, wt, v


def expect(wt, want, where):
    if wt != want:
        raise Bad("%s: wire type %d, expected %d" % (where, wt, want))


def decode_value(buf: bytes):
    tag, value = None, None
    for num, wt, v in fields(buf):
        if num == 1:
            expect(wt, 2, "Summary.Value.tag")
            tag = v
        elif num == 2:
            expect(wt, 5, "Summary.Value.simple_value")
            value = v
        else:
            raise Bad("unexpected Summary.Value field %d" % num)
    if tag is None or value is None:
        raise Bad("Summary.Value without tag or simple_value")
    return tag, value


def decode_event(buf: bytes):
    wall, step, version, values = 0, 0, None, None
    for num, wt, v in fields(buf):
        if num == 1:
            expect(wt, 1, "Event.wall_time")
            wall = v
        elif num == 2:
            expect(wt, 0, "Event.step")
            step = v - (1 << 64) if v >= 1 << 63 else v
        elif num == 3:
            expect(wt, 2, "Event.file_version")
            version = v.decode("utf-8")
        elif num == 5:
            expect(wt, 2, "Event.summary")
            values = []
            for snum, swt, sv in fields(v):
                if snum != 1:
                    raise Bad("unexpected Summary field %d" % snum)
                expect(swt, 2, "Summary.value")
                values.append(decode_value(sv))
        else:
            raise Bad("unexpected Event field %d" % num)
    if (version is None) == (values is None):
        raise Bad("an Event needs exactly one of file_version and summary")
    return wall, step, version, values


def records(data: bytes):
    pos = 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise Bad("truncated record header at byte %d" % pos)
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack_from("<I", data, pos + 8)
        if masked(crc32c(header)) != length_crc:
            raise Bad("length CRC mismatch at byte %d" % pos)
        start = pos + 12
        if start + length + 4 > len(data):
            raise Bad("truncated record at byte %d" % pos)
        payload = data[start:start + length]
        (data_crc,) = struct.unpack_from("<I", data, start + length)
        if masked(crc32c(payload)) != data_crc:
            raise Bad("data CRC mismatch at byte %d" % pos)
        yield payload
        pos = start + length + 4


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        vectors = [(bytes(32), 0x8A9136AA), (b"\xff" * 32, 0x62A8AB43),
                   (bytes(range(32)), 0x46DD794E), (b"123456789", 0xE3069283)]
        for data, want in vectors:
            if crc32c(data) != want:
                print("crc32c self-test failed", file=sys.stderr)
                return 1
        print("ok")
        return 0
    if len(argv) != 2:
        print("usage: read_tfevents.py FILE", file=sys.stderr)
        return 2
    with open(argv[1], "rb") as f:
        data = f.read()
    out = []
    try:
        for i, payload in enumerate(records(data)):
            wall, step, version, values = decode_event(payload)
            if i == 0 and version is None:
                raise Bad("the first record must carry file_version")
            if version is not None:
                out.append("version %s %016x" % (version, wall))
            else:
                for tag, value in values:
                    out.append("scalar %d %s %08x %016x" % (step, tag.hex() or "-", value, wall))
        if not out:
            raise Bad("empty file")
    except Bad as e:
        print("read_tfevents: %s: %s" % (argv[1], e), file=sys.stderr)
        return 1
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

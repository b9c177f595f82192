"""Minimal GGUF reader + ggml dequantizers in numpy (test oracle for nextn).

Owns: parsing a GGUF v2/v3 file (header, metadata KV, tensor infos) into python values and
np.memmap views, and bit-exact dequantization of F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K
into float32 (same float32 operation order as ggml's reference dequantizers).
Promises: no copy of tensor data until a tensor is dequantized; clear ValueError on a malformed
file. Must never: depend on anything but numpy and the standard library.
Layouts are written from the public ggml block definitions (facts only, no code copied).
"""
import struct
import sys

import numpy as np

# ggml type ids (ggml.h enum ggml_type)
T_F32, T_F16, T_Q4_0, T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0 = 0, 1, 2, 3, 6, 7, 8
T_Q2_K, T_Q3_K, T_Q4_K, T_Q5_K, T_Q6_K, T_Q8_K = 10, 11, 12, 13, 14, 15
T_I8, T_I16, T_I32, T_I64, T_F64, T_BF16 = 24, 25, 26, 27, 28, 30

TYPE_NAMES = {T_F32: "F32", T_F16: "F16", T_Q4_0: "Q4_0", T_Q4_1: "Q4_1", T_Q5_0: "Q5_0",
              T_Q5_1: "Q5_1", T_Q8_0: "Q8_0", T_Q2_K: "Q2_K", T_Q3_K: "Q3_K", T_Q4_K: "Q4_K",
              T_Q5_K: "Q5_K", T_Q6_K: "Q6_K", T_Q8_K: "Q8_K", T_I8: "I8", T_I16: "I16",
              T_I32: "I32", T_I64: "I64", T_F64: "F64", T_BF16: "BF16"}

# (values per block, bytes per block)
BLOCK = {T_F32: (1, 4), T_F16: (1, 2), T_BF16: (1, 2), T_I8: (1, 1), T_I16: (1, 2),
         T_I32: (1, 4), T_I64: (1, 8), T_F64: (1, 8),
         T_Q4_0: (32, 18), T_Q4_1: (32, 20), T_Q5_0: (32, 22), T_Q5_1: (32, 24),
         T_Q8_0: (32, 34), T_Q2_K: (256, 84), T_Q3_K: (256, 110), T_Q4_K: (256, 144),
         T_Q5_K: (256, 176), T_Q6_K: (256, 210), T_Q8_K: (256, 292)}

QUANTIZED = {T_Q4_0, T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0, T_Q2_K, T_Q3_K, T_Q4_K, T_Q5_K, T_Q6_K,
             T_Q8_K}

# GGUF metadata value types
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}


class TensorInfo:
    def __init__(self, name, ne, typ, offset):
        self.name, self.ne, self.type, self.offset = name, tuple(ne), typ, offset

    @property
    def n_elements(self):
        n = 1
        for d in self.ne:
            n *= d
        return n

    @property
    def nbytes(self):
        bs, bb = BLOCK[self.type]
        return self.n_elements // bs * bb

    def __repr__(self):
        return "%s %s %s" % (self.name, TYPE_NAMES.get(self.type, self.type), list(self.ne))


class GGUF:
    """A parsed GGUF file. kv: dict key -> value (arrays as lists); tensors: dict name -> TensorInfo."""

    def __init__(self, path):
        self.path = path
        self.mm = np.memmap(path, dtype=np.uint8, mode="r")
        self._pos = 4
        if len(self.mm) < 24 or bytes(self.mm[:4]) != b"GGUF":
            raise ValueError("%s: not a GGUF file (bad magic)" % path)
        self.version = self._u("<I")
        if self.version not in (2, 3):
            raise ValueError("%s: unsupported GGUF version %d" % (path, self.version))
        n_tensors = self._u("<Q")
        n_kv = self._u("<Q")
        if n_tensors > 1 << 24 or n_kv > 1 << 24:
            raise ValueError("%s: implausible counts (%d tensors, %d kv)" % (path, n_tensors, n_kv))
        self.kv = {}
        for _ in range(n_kv):
            key = self._str()
            typ = self._u("<I")
            self.kv[key] = self._value(typ)
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._str()
            nd = self._u("<I")
            if nd > 4:
                raise ValueError("%s: tensor %s has %d dims" % (path, name, nd))
            ne = [self._u("<Q") for _ in range(nd)]
            typ = self._u("<I")
            off = self._u("<Q")
            if typ not in BLOCK:
                raise ValueError("%s: tensor %s has unknown type %d" % (path, name, typ))
            self.tensors[name] = TensorInfo(name, ne, typ, off)
        align = int(self.kv.get("general.alignment", 32))
        self.data_offset = (self._pos + align - 1) // align * align
        for t in self.tensors.values():
            end = self.data_offset + t.offset + t.nbytes
            if t.n_elements % BLOCK[t.type][0] != 0 or end > len(self.mm):
                raise ValueError("%s: tensor %s data out of bounds or not block aligned" % (path, t.name))

    # -- low-level parsing ------------------------------------------------
    def _u(self, fmt):
        n = struct.calcsize(fmt)
        if self._pos + n > len(self.mm):
            raise ValueError("%s: truncated header" % self.path)
        v = struct.unpack_from(fmt, self.mm, self._pos)[0]
        self._pos += n
        return v

    def _str(self):
        n = self._u("<Q")
        if self._pos + n > len(self.mm):
            raise ValueError("%s: truncated string" % self.path)
        s = bytes(self.mm[self._pos:self._pos + n]).decode("utf-8", errors="replace")
        self._pos += n
        return s

    def _value(self, typ):
        if typ in _SCALAR:
            return self._u(_SCALAR[typ])
        if typ == 8:
            return self._str()
        if typ == 9:
            et = self._u("<I")
            n = self._u("<Q")
            if et in _SCALAR:  # fast path for numeric arrays
                fmt = _SCALAR[et]
                sz = struct.calcsize(fmt)
                if self._pos + n * sz > len(self.mm):
                    raise ValueError("%s: truncated array" % self.path)
                arr = np.frombuffer(self.mm, dtype=np.dtype(fmt), count=n, offset=self._pos)
                self._pos += n * sz
                return arr.tolist()
            return [self._value(et) for _ in range(n)]
        raise ValueError("%s: unknown metadata type %d" % (self.path, typ))

    # -- tensors ----------------------------------------------------------
    def raw(self, name):
        """Raw bytes of a tensor as a uint8 memmap view."""
        t = self.tensors[name]
        s = self.data_offset + t.offset
        return self.mm[s:s + t.nbytes]

    def tensor(self, name):
        """Dequantized float32 array in numpy order (reversed ne: shape = ne[::-1])."""
        t = self.tensors[name]
        flat = dequantize(self.raw(name), t.type, t.n_elements)
        return flat.reshape(tuple(reversed(t.ne)))

    def get(self, key, default=None):
        return self.kv.get(key, default)


# ---------------------------------------------------------------------------
# dequantization (float32 arithmetic in the same order as ggml's reference code)

def f16_to_f32(u16):
    return np.asarray(u16, dtype=np.uint16).view(np.float16).astype(np.float32)


def bf16_to_f32(u16):
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _blocks(raw, bb):
    return np.asarray(raw, dtype=np.uint8).reshape(-1, bb)


def _deq_q8_0(b):
    d = f16_to_f32(b[:, 0:2].copy().view(np.uint16))  # (nb,1)
    q = b[:, 2:34].view(np.int8).astype(np.float32)
    return (q * d).reshape(-1)


def _deq_q4_0(b):
    d = f16_to_f32(b[:, 0:2].copy().view(np.uint16))
    qs = b[:, 2:18]
    lo = (qs & 0x0F).astype(np.int32) - 8
    hi = (qs >> 4).astype(np.int32) - 8
    q = np.concatenate([lo, hi], axis=1).astype(np.float32)
    return (q * d).reshape(-1)


def _scale_min_k4(sc):
    """sc: (nb,12) uint8 -> (scales (nb,8), mins (nb,8)) as float32 of the 6-bit values."""
    sc = sc.astype(np.uint16)
    d = np.empty((sc.shape[0], 8), np.uint16)
    m = np.empty((sc.shape[0], 8), np.uint16)
    for j in range(8):
        if j < 4:
            d[:, j] = sc[:, j] & 63
            m[:, j] = sc[:, j + 4] & 63
        else:
            d[:, j] = (sc[:, j + 4] & 0xF) | ((sc[:, j - 4] >> 6) << 4)
            m[:, j] = (sc[:, j + 4] >> 4) | ((sc[:, j] >> 6) << 4)
    return d.astype(np.float32), m.astype(np.float32)


def _deq_q4_k(b):
    nb = b.shape[0]
    d = f16_to_f32(b[:, 0:2].copy().view(np.uint16))      # (nb,1)
    dmin = f16_to_f32(b[:, 2:4].copy().view(np.uint16))
    sc, mn = _scale_min_k4(b[:, 4:16])
    qs = b[:, 16:144].reshape(nb, 4, 32)                   # 4 chunks of 64 values
    out = np.empty((nb, 4, 2, 32), np.float32)
    d1 = d * sc                                            # float32 products, as ggml: d*sc
    m1 = dmin * mn
    for c in range(4):
        lo = (qs[:, c] & 0xF).astype(np.float32)
        hi = (qs[:, c] >> 4).astype(np.float32)
        out[:, c, 0] = d1[:, 2 * c:2 * c + 1] * lo - m1[:, 2 * c:2 * c + 1]
        out[:, c, 1] = d1[:, 2 * c + 1:2 * c + 2] * hi - m1[:, 2 * c + 1:2 * c + 2]
    return out.reshape(-1)


def _deq_q5_k(b):
    nb = b.shape[0]
    d = f16_to_f32(b[:, 0:2].copy().view(np.uint16))
    dmin = f16_to_f32(b[:, 2:4].copy().view(np.uint16))
    sc, mn = _scale_min_k4(b[:, 4:16])
    qh = b[:, 16:48]
    ql = b[:, 48:176].reshape(nb, 4, 32)
    out = np.empty((nb, 4, 2, 32), np.float32)
    d1 = d * sc
    m1 = dmin * mn
    for c in range(4):
        u1, u2 = 1 << (2 * c), 2 << (2 * c)
        lo = (ql[:, c] & 0xF).astype(np.float32) + np.where(qh & u1, 16.0, 0.0).astype(np.float32)
        hi = (ql[:, c] >> 4).astype(np.float32) + np.where(qh & u2, 16.0, 0.0).astype(np.float32)
        out[:, c, 0] = d1[:, 2 * c:2 * c + 1] * lo - m1[:, 2 * c:2 * c + 1]
        out[:, c, 1] = d1[:, 2 * c + 1:2 * c + 2] * hi - m1[:, 2 * c + 1:2 * c + 2]
    return out.reshape(-1)


def _deq_q6_k(b):
    nb = b.shape[0]
    ql = b[:, 0:128].astype(np.int32)
    qh = b[:, 128:192].astype(np.int32)
    sc = b[:, 192:208].view(np.int8).astype(np.float32)
    d = f16_to_f32(b[:, 208:210].copy().view(np.uint16))
    out = np.empty((nb, 2, 4, 32), np.float32)
    for n in range(2):
        L = ql[:, 64 * n:64 * n + 64]
        H = qh[:, 32 * n:32 * n + 32]
        s = sc[:, 8 * n:8 * n + 8]
        q1 = ((L[:, 0:32] & 0xF) | (((H >> 0) & 3) << 4)) - 32
        q2 = ((L[:, 32:64] & 0xF) | (((H >> 2) & 3) << 4)) - 32
        q3 = ((L[:, 0:32] >> 4) | (((H >> 4) & 3) << 4)) - 32
        q4 = ((L[:, 32:64] >> 4) | (((H >> 6) & 3) << 4)) - 32
        for k, q in enumerate((q1, q2, q3, q4)):
            # is = l/16: first 16 values use scale 2k, next 16 use 2k+1 (ggml: sc[is + 2k])
            ds = d * s[:, 2 * k:2 * k + 2]                  # (nb,2) float32: d*sc
            out[:, n, k, 0:16] = ds[:, 0:1] * q[:, 0:16].astype(np.float32)
            out[:, n, k, 16:32] = ds[:, 1:2] * q[:, 16:32].astype(np.float32)
    return out.reshape(-1)


def dequantize(raw, typ, n):
    raw = np.asarray(raw, dtype=np.uint8)
    if typ == T_F32:
        return raw.view(np.float32)[:n].astype(np.float32)
    if typ == T_F16:
        return raw.view(np.float16)[:n].astype(np.float32)
    if typ == T_BF16:
        return bf16_to_f32(raw.view(np.uint16)[:n])
    if typ == T_F64:
        return raw.view(np.float64)[:n].astype(np.float32)
    if typ in (T_I8, T_I16, T_I32, T_I64):
        dt = {T_I8: np.int8, T_I16: np.int16, T_I32: np.int32, T_I64: np.int64}[typ]
        return raw.view(dt)[:n].astype(np.float32)
    fn = {T_Q8_0: _deq_q8_0, T_Q4_0: _deq_q4_0, T_Q4_K: _deq_q4_k, T_Q5_K: _deq_q5_k,
          T_Q6_K: _deq_q6_k}.get(typ)
    if fn is None:
        raise ValueError("dequantize: type %s not supported by the numpy reference"
                         % TYPE_NAMES.get(typ, typ))
    bs, bb = BLOCK[typ]
    out = fn(_blocks(raw, bb))
    assert out.size == n
    return out


# ---------------------------------------------------------------------------
# writer (F32/F16 tensors only; for self-tests that derive models from existing ones)

def _w_str(out, s):
    b = s.encode("utf-8")
    out += struct.pack("<Q", len(b)) + b


def _w_value(out, v):
    if isinstance(v, bool):
        out += struct.pack("<I?", 7, v)
    elif isinstance(v, int):
        out += struct.pack("<Ii", 5, v) if -2**31 <= v < 2**31 else struct.pack("<Iq", 11, v)
    elif isinstance(v, float):
        out += struct.pack("<If", 6, v)
    elif isinstance(v, str):
        out += struct.pack("<I", 8)
        _w_str(out, v)
    elif isinstance(v, (list, tuple)):
        if all(isinstance(x, str) for x in v) and v:
            out += struct.pack("<IIQ", 9, 8, len(v))
            for x in v:
                _w_str(out, x)
        elif all(isinstance(x, float) for x in v) and v:
            out += struct.pack("<IIQ", 9, 6, len(v)) + struct.pack("<%df" % len(v), *v)
        else:
            out += struct.pack("<IIQ", 9, 5, len(v)) + struct.pack("<%di" % len(v), *[int(x) for x in v])
    else:
        raise ValueError("gguf writer: unsupported value %r" % (v,))


def write_gguf(path, kv, tensors, align=32):
    """kv: dict key -> python value; tensors: dict name -> numpy array (float32 -> F32, float16 ->
    F16) in numpy order (ne = shape reversed)."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for k, v in kv.items():
        _w_str(out, k)
        _w_value(out, v)
    blobs, off = [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        typ = T_F16 if a.dtype == np.float16 else T_F32
        a = a.astype(np.float16 if typ == T_F16 else np.float32)
        _w_str(out, name)
        out += struct.pack("<I", a.ndim) + struct.pack("<%dQ" % a.ndim, *reversed(a.shape))
        out += struct.pack("<IQ", typ, off)
        blobs.append((off, a.tobytes()))
        off = (off + a.nbytes + align - 1) // align * align
    out += b"\0" * ((-len(out)) % align)
    base = len(out)
    data = bytearray(off)
    for o, b in blobs:
        data[o:o + len(b)] = b
    with open(path, "wb") as f:
        f.write(bytes(out[:base]) + bytes(data))


def main(argv):
    if len(argv) < 2:
        print("usage: gguf_np.py FILE.gguf [--tensors]")
        return 2
    g = GGUF(argv[1])
    for k, v in g.kv.items():
        if isinstance(v, list) and len(v) > 8:
            v = "[%d items] %s ..." % (len(v), v[:4])
        print("%s = %s" % (k, v))
    if "--tensors" in argv:
        for t in g.tensors.values():
            print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

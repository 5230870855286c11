// A small CBOR (RFC 8949) decoder and encoder, enough for Conway transactions and Plutus data:
// unsigned and negative integers (a BigInt past 2^53), byte and text strings (definite or
// chunked), arrays and maps (definite or indefinite), tags, simple values. Maps decode to a
// JS Map (their keys may be integers or bytes), byte strings to Uint8Array, tags to Tagged.

export class Tagged {
  constructor(tag, value) { this.tag = tag; this.value = value; }
}

// An array to encode with indefinite length (as Plutus data lists are written).
export class Indefinite {
  constructor(items) { this.items = items; }
}

export function hexToBytes(hex) {
  if (typeof hex !== "string" || hex.length % 2 || /[^0-9a-fA-F]/.test(hex)) {
    throw new Error("not hex");
  }
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

export function bytesToHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

const BREAK = Symbol("break");

class Reader {
  constructor(bytes) { this.bytes = bytes; this.at = 0; }

  byte() {
    if (this.at >= this.bytes.length) throw new Error("CBOR ends early");
    return this.bytes[this.at++];
  }

  take(n) {
    if (this.at + n > this.bytes.length) throw new Error("CBOR ends early");
    const out = this.bytes.slice(this.at, this.at + n);
    this.at += n;
    return out;
  }

  // The argument of a head: a Number when safe, else a BigInt; null for indefinite length.
  argument(info) {
    if (info < 24) return info;
    if (info === 31) return null;
    const size = { 24: 1, 25: 2, 26: 4, 27: 8 }[info];
    if (!size) throw new Error(`CBOR: reserved additional info ${info}`);
    let value = 0n;
    for (const b of this.take(size)) value = (value << 8n) | BigInt(b);
    return value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value;
  }

  chunks(major) {
    const parts = [];
    for (;;) {
      const part = this.item();
      if (part === BREAK) break;
      parts.push(part);
    }
    if (major === 3) return parts.join("");
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) { out.set(p, at); at += p.length; }
    return out;
  }

  item() {
    const head = this.byte();
    const major = head >> 5;
    const info = head & 31;
    if (major === 7) {
      if (info === 31) return BREAK;
      if (info === 20) return false;
      if (info === 21) return true;
      if (info === 22) return null;
      if (info === 23) return undefined;
      if (info === 25 || info === 26 || info === 27) {
        const raw = this.take({ 25: 2, 26: 4, 27: 8 }[info]);
        const view = new DataView(raw.buffer);
        return info === 25 ? view.getUint16(0) : info === 26 ? view.getFloat32(0) : view.getFloat64(0);
      }
      return this.argument(info);
    }
    const n = this.argument(info);
    switch (major) {
      case 0: return n;
      case 1: return typeof n === "bigint" ? -1n - n : -1 - n;
      case 2: return n === null ? this.chunks(2) : this.take(Number(n));
      case 3: return n === null ? this.chunks(3) : new TextDecoder().decode(this.take(Number(n)));
      case 4: {
        const items = [];
        for (let i = 0; n === null || i < n; i++) {
          const item = this.item();
          if (item === BREAK) break;
          items.push(item);
        }
        return items;
      }
      case 5: {
        const map = new Map();
        for (let i = 0; n === null || i < n; i++) {
          const key = this.item();
          if (key === BREAK) break;
          map.set(typeof key === "object" && key !== null ? JSON.stringify(plain(key)) : key,
            this.item());
        }
        return map;
      }
      default: return new Tagged(n, this.item());
    }
  }
}

// A key that is bytes or a structure, as a map holds it (JSON of its plain form).
export function plain(value) {
  if (value instanceof Uint8Array) return bytesToHex(value);
  if (Array.isArray(value)) return value.map(plain);
  if (typeof value === "bigint") return value.toString();
  if (value instanceof Tagged) return { tag: value.tag, value: plain(value.value) };
  if (value instanceof Map) return Object.fromEntries([...value].map(([k, v]) => [k, plain(v)]));
  return value;
}

export function decode(input) {
  const reader = new Reader(typeof input === "string" ? hexToBytes(input) : input);
  const value = reader.item();
  if (reader.at !== reader.bytes.length) throw new Error("CBOR: bytes after the item");
  return value;
}

function head(major, n) {
  const value = BigInt(n);
  if (value < 24n) return [(major << 5) | Number(value)];
  for (const [info, size] of [[24, 1], [25, 2], [26, 4], [27, 8]]) {
    if (value < 1n << BigInt(8 * size)) {
      const out = [(major << 5) | info];
      for (let i = size - 1; i >= 0; i--) out.push(Number((value >> BigInt(8 * i)) & 0xffn));
      return out;
    }
  }
  throw new Error("CBOR: integer too large");
}

function write(value, out) {
  if (typeof value === "number" || typeof value === "bigint") {
    const n = BigInt(value);
    out.push(...(n >= 0n ? head(0, n) : head(1, -1n - n)));
  } else if (value instanceof Uint8Array) {
    out.push(...head(2, value.length), ...value);
  } else if (typeof value === "string") {
    const bytes = new TextEncoder().encode(value);
    out.push(...head(3, bytes.length), ...bytes);
  } else if (value instanceof Indefinite) {
    out.push(0x9f);
    for (const item of value.items) write(item, out);
    out.push(0xff);
  } else if (Array.isArray(value)) {
    out.push(...head(4, value.length));
    for (const item of value) write(item, out);
  } else if (value instanceof Map) {
    out.push(...head(5, value.size));
    for (const [k, v] of value) { write(k, out); write(v, out); }
  } else if (value instanceof Tagged) {
    out.push(...head(6, value.tag));
    write(value.value, out);
  } else if (value === false || value === true || value === null) {
    out.push(value === null ? 0xf6 : value ? 0xf5 : 0xf4);
  } else {
    throw new Error(`CBOR: cannot encode ${typeof value}`);
  }
}

export function encode(value) {
  const out = [];
  write(value, out);
  return new Uint8Array(out);
}

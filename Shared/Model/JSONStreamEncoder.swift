import FoundationEssentials

/// An `Encoder` that writes JSON as the value's `encode(to:)` runs, in the
/// order its fields are encoded. It is for stored state (a device's row,
/// written with every batch that touched the device): Foundation's
/// JSONEncoder first builds a tree of boxed values and sorts every object's
/// keys, and that was most of a service's time with a large fleet. The same
/// Codable conformance serves both, so there is no second path to keep in
/// step; JSONDecoder reads the output back to the same value (tested).
///
/// Writes must nest, as synthesized conformances do: a container is written
/// to only while it is the innermost open one, or after the ones inside it
/// are done. A conformance that goes back to an outer container and then to
/// an inner one again, or that asks for a super encoder or encodes Foundation
/// types with strategies of their own (Date, Data, URL, Decimal), makes
/// `encode` throw `Unsupported`; `JSONCoding.stored` then uses JSONEncoder.
public enum JSONStreamEncoder {
    public struct Unsupported: Error, CustomStringConvertible {
        public let description: String
    }

    public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        let stream = JSONStream()
        try stream.encodeValue(value, level: 0)
        return stream.bytes
    }
}

/// The output and the stack of open containers. Each container remembers
/// its level and the id it was opened with, so a write to one already closed
/// is caught instead of producing broken JSON.
final class JSONStream {
    var bytes: [UInt8] = []
    private var open: [(id: Int, closer: UInt8, empty: Bool)] = []
    private var nextID = 0
    /// Set for a stream that takes no writes (a super encoder's): why.
    let refusal: String?

    init(refusal: String? = nil) {
        self.refusal = refusal
        bytes.reserveCapacity(refusal == nil ? 1024 : 0)
    }

    /// Encodes one value at `level` (the number of containers around it).
    func encodeValue<T: Encodable>(_ value: T, level: Int) throws {
        if T.self == Date.self || T.self == Data.self || T.self == URL.self || T.self == Decimal.self {
            throw JSONStreamEncoder.Unsupported(description: "\(T.self) has an encoding strategy of its own")
        }
        let start = bytes.count
        try value.encode(to: JSONSlotEncoder(stream: self, level: level, start: start))
        close(deeperThan: level)
        // A value that asked for no container is an empty object, as JSONEncoder writes it.
        if bytes.count == start { bytes.append(contentsOf: [UInt8(ascii: "{"), UInt8(ascii: "}")]) }
    }

    /// Opens a container at `level`; returns its id.
    func openContainer(_ opener: UInt8, _ closer: UInt8, level: Int) throws -> Int {
        guard open.count == level else { throw JSONStreamEncoder.Unsupported(description: "a container opened out of order") }
        bytes.append(opener)
        nextID += 1
        open.append((nextID, closer, true))
        return nextID
    }

    /// Before a write into the container `id` at `level`: closes the ones
    /// inside it and writes the separator.
    func prepare(_ id: Int, level: Int) throws {
        if let refusal { throw JSONStreamEncoder.Unsupported(description: refusal) }
        close(deeperThan: level + 1)
        guard open.count == level + 1, open[level].id == id else {
            throw JSONStreamEncoder.Unsupported(description: "a write to a container that was already closed")
        }
        if open[level].empty { open[level].empty = false } else { bytes.append(UInt8(ascii: ",")) }
    }

    func isOpenCount(_ level: Int) -> Bool { open.count == level }

    func close(deeperThan level: Int) {
        while open.count > level { bytes.append(open.removeLast().closer) }
    }

    // Each write is one access to `bytes`: a class's stored property is
    // checked for exclusive access on every access, and per byte that was
    // a third of the time.
    func key(_ key: String) {
        JSONWriter.appendQuoted(key, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    func string(_ s: String) { JSONWriter.appendQuoted(s, to: &bytes) }

    func number<F: BinaryFloatingPoint & LosslessStringConvertible>(_ v: F) throws {
        // JSONEncoder refuses these by default; so does this.
        guard v.isFinite else { throw EncodingError.invalidValue(v, .init(codingPath: [], debugDescription: "\(v) is not valid JSON")) }
        JSONWriter.appendNumber(v, to: &bytes)
    }

    func integer<I: BinaryInteger>(_ v: I) { bytes.append(contentsOf: String(v).utf8) }
    func bool(_ v: Bool) { bytes.append(contentsOf: (v ? "true" : "false").utf8) }
    func null() { bytes.append(contentsOf: "null".utf8) }
}

/// The encoder a value is handed: it writes at one place in the output.
private struct JSONSlotEncoder: Encoder {
    let stream: JSONStream
    let level: Int
    /// Where this value's output begins.
    let start: Int
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(JSONKeyedContainer<Key>(stream: stream, level: level, id: open(UInt8(ascii: "{"), UInt8(ascii: "}"))))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        JSONUnkeyedContainer(stream: stream, level: level, id: open(UInt8(ascii: "["), UInt8(ascii: "]")))
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { JSONSingleValue(stream: stream, level: level, start: start) }

    /// A container's id, or 0 (never valid) when it cannot be opened here:
    /// its first write then throws, since these methods cannot.
    private func open(_ opener: UInt8, _ closer: UInt8) -> Int {
        (try? stream.openContainer(opener, closer, level: level)) ?? 0
    }

    /// What a super encoder is here: whatever is written to it throws.
    static var refusing: JSONSlotEncoder { JSONSlotEncoder(stream: JSONStream(refusal: "super encoders are not supported"), level: 0, start: 0) }
}

private struct JSONKeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let stream: JSONStream
    let level: Int
    let id: Int
    var codingPath: [any CodingKey] { [] }

    private func begin(_ key: Key) throws {
        try stream.prepare(id, level: level)
        stream.key(key.stringValue)
    }

    mutating func encodeNil(forKey key: Key) throws { try begin(key); stream.null() }
    mutating func encode(_ value: Bool, forKey key: Key) throws { try begin(key); stream.bool(value) }
    mutating func encode(_ value: String, forKey key: Key) throws { try begin(key); stream.string(value) }
    mutating func encode(_ value: Double, forKey key: Key) throws { try begin(key); try stream.number(value) }
    mutating func encode(_ value: Float, forKey key: Key) throws { try begin(key); try stream.number(value) }
    mutating func encode(_ value: Int, forKey key: Key) throws { try begin(key); stream.integer(value) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { try begin(key); stream.integer(value) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { try begin(key); stream.integer(value) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { try begin(key); stream.integer(value) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { try begin(key); stream.integer(value) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { try begin(key); stream.integer(value) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { try begin(key); stream.integer(value) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { try begin(key); stream.integer(value) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { try begin(key); stream.integer(value) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { try begin(key); stream.integer(value) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try begin(key)
        try stream.encodeValue(value, level: level + 1)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let id = (try? begin(key)).flatMap { try? stream.openContainer(UInt8(ascii: "{"), UInt8(ascii: "}"), level: level + 1) } ?? 0
        return KeyedEncodingContainer(JSONKeyedContainer<NestedKey>(stream: stream, level: level + 1, id: id))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let id = (try? begin(key)).flatMap { try? stream.openContainer(UInt8(ascii: "["), UInt8(ascii: "]"), level: level + 1) } ?? 0
        return JSONUnkeyedContainer(stream: stream, level: level + 1, id: id)
    }

    mutating func superEncoder() -> any Encoder { JSONSlotEncoder.refusing }
    mutating func superEncoder(forKey key: Key) -> any Encoder { JSONSlotEncoder.refusing }
}

private struct JSONUnkeyedContainer: UnkeyedEncodingContainer {
    let stream: JSONStream
    let level: Int
    let id: Int
    private(set) var count = 0
    var codingPath: [any CodingKey] { [] }

    init(stream: JSONStream, level: Int, id: Int) { self.stream = stream; self.level = level; self.id = id }

    private mutating func begin() throws {
        try stream.prepare(id, level: level)
        count += 1
    }

    mutating func encodeNil() throws { try begin(); stream.null() }
    mutating func encode(_ value: Bool) throws { try begin(); stream.bool(value) }
    mutating func encode(_ value: String) throws { try begin(); stream.string(value) }
    mutating func encode(_ value: Double) throws { try begin(); try stream.number(value) }
    mutating func encode(_ value: Float) throws { try begin(); try stream.number(value) }
    mutating func encode(_ value: Int) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: Int8) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: Int16) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: Int32) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: Int64) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: UInt) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: UInt8) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: UInt16) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: UInt32) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: UInt64) throws { try begin(); stream.integer(value) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        try begin()
        try stream.encodeValue(value, level: level + 1)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let id = (try? begin()).flatMap { try? stream.openContainer(UInt8(ascii: "{"), UInt8(ascii: "}"), level: level + 1) } ?? 0
        return KeyedEncodingContainer(JSONKeyedContainer<NestedKey>(stream: stream, level: level + 1, id: id))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let id = (try? begin()).flatMap { try? stream.openContainer(UInt8(ascii: "["), UInt8(ascii: "]"), level: level + 1) } ?? 0
        return JSONUnkeyedContainer(stream: stream, level: level + 1, id: id)
    }

    mutating func superEncoder() -> any Encoder { JSONSlotEncoder.refusing }
}

private struct JSONSingleValue: SingleValueEncodingContainer {
    let stream: JSONStream
    let level: Int
    let start: Int
    var codingPath: [any CodingKey] { [] }

    /// A single value is written once, where its slot is, and is all the slot holds.
    private func begin() throws {
        if let refusal = stream.refusal { throw JSONStreamEncoder.Unsupported(description: refusal) }
        guard stream.isOpenCount(level), stream.bytes.count == start else {
            throw JSONStreamEncoder.Unsupported(description: "a second value written where one was")
        }
    }

    mutating func encodeNil() throws { try begin(); stream.null() }
    mutating func encode(_ value: Bool) throws { try begin(); stream.bool(value) }
    mutating func encode(_ value: String) throws { try begin(); stream.string(value) }
    mutating func encode(_ value: Double) throws { try begin(); try stream.number(value) }
    mutating func encode(_ value: Float) throws { try begin(); try stream.number(value) }
    mutating func encode(_ value: Int) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: Int8) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: Int16) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: Int32) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: Int64) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: UInt) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: UInt8) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: UInt16) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: UInt32) throws { try begin(); stream.integer(value) }
    mutating func encode(_ value: UInt64) throws { try begin(); stream.integer(value) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        try begin()
        try stream.encodeValue(value, level: level)
    }
}

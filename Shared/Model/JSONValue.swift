import FoundationEssentials

/// Any JSON value: command arguments and results travel as this, so that a
/// service decodes only the arguments of the commands it owns.
public enum JSONValue: Codable, Sendable, Equatable, Hashable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        func attempt<T: Decodable>(_ type: T.Type) -> T? {
            // Each kind is tried in turn: a mismatch only says "not this kind", and the last one reports.
            try? container.decode(type)
        }
        if container.decodeNil() { self = .null }
        else if let value = attempt(Bool.self) { self = .bool(value) }
        else if let value = attempt(Double.self) {
            // Beyond ±2^53 a JSON integer has no exact Double: refuse it rather than round it.
            guard abs(value) < 9_007_199_254_740_992 || value.rounded() != value else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath,
                                                        debugDescription: "expected a whole number within ±2^53"))
            }
            self = .number(value)
        }
        else if let value = attempt(String.self) { self = .string(value) }
        else if let value = attempt([JSONValue].self) { self = .array(value) }
        else { self = .object(try container.decode([String: JSONValue].self)) }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value):
            // Integral values print without a fraction: ids and times stay integers.
            if value.rounded() == value, abs(value) < 9e15 { try container.encode(Int64(value)) }
            else { try container.encode(value) }
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// Converts any Encodable into a JSONValue (for command results).
    public init(encoding value: some Encodable) throws {
        let data = try JSONCoding.encoder.encode(value)
        self = try JSONCoding.decoder.decode(JSONValue.self, from: data)
    }

    /// Decodes this value as `T` (for command arguments).
    public func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try JSONCoding.decoder.decode(T.self, from: JSONCoding.encoder.encode(self))
    }

    public subscript(key: String) -> JSONValue? {
        if case .object(let fields) = self { return fields[key] }
        return nil
    }

    public var stringValue: String? { if case .string(let s) = self { return s }; return nil }
    public var doubleValue: Double? { if case .number(let n) = self { return n }; return nil }
    public var boolValue: Bool? { if case .bool(let b) = self { return b }; return nil }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a }; return nil }
    public var int64Value: Int64? { doubleValue.map { Int64($0) } }
}

/// Shared coders: sorted keys keep wire output stable and diffable.
public enum JSONCoding {
    public static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()
    public static let decoder = JSONDecoder()

    public static func encode(_ value: some Encodable) -> Data { foundationEncode(value) }
    public static func bytes(_ value: some Encodable) -> [UInt8] { Array(foundationEncode(value)) }

    /// Always JSONEncoder, even for types with a direct writer: the reference
    /// every direct writer is held to (`WriterAgreementTests`).
    public static func foundation(_ value: some Encodable) -> Data { foundationEncode(value) }

    static func foundationEncode(_ value: some Encodable) -> Data {
        // Our own model types always encode; a failure here is a programming error.
        do { return try encoder.encode(value) } catch { preconditionFailure("encoding \(type(of: value)) failed: \(error)") }
    }

    public static func string(_ value: some Encodable) -> String {
        String(decoding: encode(value), as: UTF8.self)
    }

    /// Stored state (a device's row): written as it encodes, in field order,
    /// by `JSONStreamEncoder`; a value it cannot write goes through JSONEncoder.
    /// `TRACKER_JSON=foundation` measures what it is worth.
    public static func stored(_ value: some Encodable) -> [UInt8] {
        if fastPaths, let bytes = try? JSONStreamEncoder.encode(value) { return bytes }
        return Array(foundationEncode(value))
    }
}

/// A device id: 1–64 characters of `A-Z a-z 0-9 . _ -`, not starting with `_`
/// (those are reserved, like `_fleet`).
public struct DeviceID: Hashable, Sendable, Codable, Comparable, CustomStringConvertible {
    public let rawValue: String

    public static let fleet = DeviceID(reserved: "_fleet")

    /// Validates a device id from a topic or a payload.
    public init?(_ rawValue: String) {
        guard Self.isValid(rawValue, allowReserved: false) else { return nil }
        self.rawValue = rawValue
    }

    /// A reserved id such as `_fleet`; valid characters, leading underscore allowed.
    public init(reserved rawValue: String) {
        precondition(Self.isValid(rawValue, allowReserved: true), "bad reserved id \(rawValue)")
        self.rawValue = rawValue
    }

    /// Accepts an ordinary or a reserved id (a command topic may address `_fleet`).
    public init?(allowingReserved rawValue: String) {
        guard Self.isValid(rawValue, allowReserved: true) else { return nil }
        self.rawValue = rawValue
    }

    public var isReserved: Bool { rawValue.hasPrefix("_") }
    public var description: String { rawValue }
    public static func < (a: DeviceID, b: DeviceID) -> Bool { a.rawValue < b.rawValue }

    public init(from decoder: any Decoder) throws {
        let raw = try decoder.singleValueContainer().decode(String.self)
        guard let id = DeviceID(allowingReserved: raw) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath,
                                                    debugDescription: "invalid device id '\(raw)'"))
        }
        self = id
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    static func isValid(_ s: String, allowReserved: Bool) -> Bool {
        let bytes = s.utf8
        guard (1...64).contains(bytes.count) else { return false }
        if !allowReserved, bytes.first == UInt8(ascii: "_") { return false }
        return bytes.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                || b == UInt8(ascii: ".") || b == UInt8(ascii: "_") || b == UInt8(ascii: "-")
        }
    }
}

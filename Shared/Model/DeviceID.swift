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

// MARK: OwnTracks names

extension DeviceID {
    /// The device id of the OwnTracks topic `owntracks/{user}/{device}`, for
    /// every user and device name an app may use (e-mail addresses, spaces,
    /// apostrophes, any UTF-8). Stable (a function of the two names alone) and
    /// injective; docs/contract.md ("OwnTracks device ids") is the rule:
    ///
    /// - **plain**: `{user}.{device}` when that is a valid id (both names non-empty,
    ///   of `A-Z a-z 0-9 . _ -` only, 64 bytes at most together, the user not
    ///   starting with `_`): the ids of earlier versions, unchanged.
    /// - **escaped**: otherwise the bytes of `{user}/{device}`, each of
    ///   `A-Z a-z 0-9 -` kept and every other one (`.`, `_`, `/`, `@`, a space,
    ///   each byte of a non-ASCII character, a leading `-`) written `_xx` in
    ///   lowercase hex; a result that starts with `_` gets a `-` before it.
    ///   `jane@example.com` / `Jane's iPhone` → `jane_40example_2ecom_2fJane_27s_20iPhone`.
    ///   It never holds a `.`, so it is never a plain id.
    /// - **hashed**: an escaped id over 64 bytes is cut to its first whole
    ///   escapes within 46 bytes, followed by `__` and the 16 hex digits of the
    ///   FNV-1a 64-bit hash of `{user}/{device}`'s bytes (`__` never occurs in
    ///   an escaped id).
    public static func ownTracks(user: String, device: String) -> DeviceID {
        if !user.isEmpty, !device.isEmpty, let plain = DeviceID("\(user).\(device)") { return plain }
        var bytes = Array(user.utf8)
        bytes.append(UInt8(ascii: "/"))
        bytes.append(contentsOf: device.utf8)
        var units: [String] = []
        units.reserveCapacity(bytes.count + 1)
        for (index, b) in bytes.enumerated() {
            let kept = (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                || (b == UInt8(ascii: "-") && index > 0)
            units.append(kept ? String(UnicodeScalar(b)) : "_" + Self.hex(UInt64(b), digits: 2))
        }
        if units.first?.hasPrefix("_") == true { units.insert("-", at: 0) }
        var escaped = units.joined()
        if escaped.utf8.count > 64 {
            var cut = ""
            for unit in units {
                guard cut.utf8.count + unit.utf8.count <= 46 else { break }
                cut += unit
            }
            escaped = cut + "__" + Self.hex(Self.fnv1a64(bytes), digits: 16)
        }
        guard let id = DeviceID(escaped) else { preconditionFailure("OwnTracks id '\(escaped)' is not a device id") }
        return id
    }

    /// The OwnTracks user and device names this id was made from, when the id
    /// alone tells them: a plain id splits at its first `.` (a user name
    /// with a `.` in it reads wrong here: the gateway's store keeps the names
    /// as they came), an escaped one is decoded. Nil for a hashed id and for
    /// an id `ownTracks(user:device:)` never makes.
    public var ownTracksNames: (user: String, device: String)? {
        let bytes = Array(rawValue.utf8)
        let user: String, device: String
        if let dot = bytes.firstIndex(of: UInt8(ascii: ".")) {
            user = String(decoding: bytes[..<dot], as: UTF8.self)
            device = String(decoding: bytes[(dot + 1)...], as: UTF8.self)
        } else {
            var decoded: [UInt8] = []
            var i = bytes.first == UInt8(ascii: "-") && bytes.count > 1 && bytes[1] == UInt8(ascii: "_") ? 1 : 0
            while i < bytes.count {
                if bytes[i] == UInt8(ascii: "_") {
                    guard i + 2 < bytes.count, let value = UInt8(String(decoding: bytes[(i + 1)...(i + 2)], as: UTF8.self), radix: 16) else {
                        return nil
                    }
                    decoded.append(value)
                    i += 3
                } else {
                    decoded.append(bytes[i])
                    i += 1
                }
            }
            guard let slash = decoded.firstIndex(of: UInt8(ascii: "/")) else { return nil }
            user = String(decoding: decoded[..<slash], as: UTF8.self)
            device = String(decoding: decoded[(slash + 1)...], as: UTF8.self)
        }
        // Only what the mapping makes: the same names must give this id back.
        guard Self.ownTracks(user: user, device: device) == self else { return nil }
        return (user, device)
    }

    static func hex(_ value: UInt64, digits: Int) -> String {
        let text = String(value, radix: 16)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }

    static func fnv1a64(_ bytes: [UInt8]) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in bytes {
            hash ^= UInt64(b)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return hash
    }
}

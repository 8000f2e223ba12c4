import Foundation
import Model

/// Who a request says it is: a broker account (HTTP Basic), or, for
/// Traccar Client, which cannot send a password, a device's ingest token
/// given as its `id`.
public enum Credentials: Equatable, Sendable {
    case account(username: String, password: String)
    /// `{device}~{secret}`: the broker account `ingest.{device}` with the secret as its password
    /// (made by `trackerctl accounts add token`), which may only publish the device's fixes.
    case ingestToken(device: DeviceID, secret: String)

    /// The broker login these credentials are.
    public var username: String {
        switch self {
        case .account(let username, _): username
        case .ingestToken(let device, _): IngestToken.login(for: device)
        }
    }

    public var password: String {
        switch self {
        case .account(_, let password): password
        case .ingestToken(_, let secret): secret
        }
    }

    /// HTTP Basic (`Authorization: Basic base64(user:password)`); nil when absent or not Basic.
    public static func basic(_ header: String?) -> Credentials? {
        guard let header else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "basic",
              let data = Data(base64Encoded: String(parts[1]).trimmingCharacters(in: .whitespaces)),
              let text = String(data: data, encoding: .utf8), let colon = text.firstIndex(of: ":") else { return nil }
        let username = String(text[..<colon]), password = String(text[text.index(after: colon)...])
        guard !username.isEmpty else { return nil }
        return .account(username: username, password: password)
    }
}

/// Ingest tokens: `{device}~{secret}`, the secret at least 32 URL-safe characters.
public enum IngestToken {
    public static let separator: Character = "~"
    public static let loginPrefix = "ingest."

    public static func login(for device: DeviceID) -> String { loginPrefix + device.rawValue }

    /// A token's device and secret; nil for anything else (a plain device name among them).
    public static func parse(_ id: String) -> Credentials? {
        guard let cut = id.lastIndex(of: separator), let device = DeviceID(String(id[..<cut])) else { return nil }
        let secret = String(id[id.index(after: cut)...])
        guard secret.count >= 32, secret.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else { return nil }
        return .ingestToken(device: device, secret: secret)
    }
}

/// Wrong credentials per client address: after `limit` failures within
/// `windowMs`, that address is answered 429 without asking the broker until
/// the window has passed. Nothing happens to the account on the broker.
public struct LoginThrottle: Sendable {
    public let limit: Int
    public let windowMs: Int64
    /// Address → times of its recent failures (oldest first).
    private var failures: [String: [Int64]] = [:]

    public init(limit: Int = 5, windowMs: Int64 = 60_000) { self.limit = limit; self.windowMs = windowMs }

    /// Whether a login from `address` may be tried now; when not, the milliseconds until it may.
    public mutating func check(_ address: String, nowMs: Int64) -> Int64? {
        prune(address, nowMs: nowMs)
        guard let times = failures[address], times.count >= limit, let oldest = times.first else { return nil }
        return oldest + windowMs - nowMs
    }

    public mutating func failed(_ address: String, nowMs: Int64) {
        prune(address, nowMs: nowMs)
        failures[address, default: []].append(nowMs)
        // Bounded: a flood from many addresses forgets the oldest addresses' failures, never grows without end.
        if failures.count > 10_000 { failures.removeAll(keepingCapacity: true) }
    }

    public mutating func succeeded(_ address: String) { failures[address] = nil }

    private mutating func prune(_ address: String, nowMs: Int64) {
        guard var times = failures[address] else { return }
        times.removeAll { $0 <= nowMs - windowMs }
        failures[address] = times.isEmpty ? nil : times
    }
}

import Bus
import FoundationEssentials

/// How often each message failed to be stored, so one that keeps failing for
/// a reason of its own is dropped (loudly) instead of blocking the queue.
struct FailedAttempts {
    static let limit = 3
    private var counts: [UInt64: Int] = [:]

    static func key(_ message: MQTTMessage) -> UInt64 {
        // FNV-1a over topic and payload: the same message redelivered has the same key.
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in message.topic.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        for byte in message.payload { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return hash
    }

    var isEmpty: Bool { counts.isEmpty }

    func exhausted(_ key: UInt64) -> Bool { counts[key, default: 0] >= Self.limit }

    mutating func record(_ key: UInt64) {
        if counts.count > 10_000 { counts.removeAll() }  // bounded: a storm of distinct failures starts the count over
        counts[key, default: 0] += 1
    }

    mutating func forget(_ key: UInt64) { if !counts.isEmpty { counts[key] = nil } }
}

/// At most `perMinute` log lines a minute for one noisy cause.
struct RateLimit {
    let perMinute: Int
    private var windowStartMs: Int64?
    private var used = 0

    init(perMinute: Int) { self.perMinute = perMinute }

    mutating func allow(nowMs: Int64) -> Bool {
        if windowStartMs.map({ nowMs - $0 >= 60_000 }) ?? true { windowStartMs = nowMs; used = 0 }
        used += 1
        return used <= perMinute
    }
}

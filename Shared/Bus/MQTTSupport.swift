import CMosquitto
import Dispatch
import FoundationEssentials
import TrackerLog
import Synchronization

/// QoS 1 messages waiting for room below `maxOutstanding`: a FIFO with O(1)
/// removal at the front.
struct Backlog {
    private var items: [(MQTTMessage, MQTTClient.Acknowledgement)] = []
    private var head = 0

    var isEmpty: Bool { head == items.count }
    var count: Int { items.count - head }
    var first: (MQTTMessage, MQTTClient.Acknowledgement)? { isEmpty ? nil : items[head] }

    mutating func append(_ message: MQTTMessage, _ ack: @escaping MQTTClient.Acknowledgement) { items.append((message, ack)) }

    mutating func removeFirst() {
        head += 1
        // Compact once the consumed prefix dominates, so memory follows the backlog.
        if head > 1_024, head * 2 > items.count { items.removeFirst(head); head = 0 }
    }

    mutating func drain() -> [MQTTClient.Acknowledgement] {
        defer { items = []; head = 0 }
        return items[head...].map(\.1)
    }
}

/// Resumes a continuation exactly once, whichever of result or timeout comes
/// first; a result that arrives before the continuation is kept for it.
final class ResumeOnce<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var early: Result<T, any Error>?
        var finished = false
    }
    private let state = Mutex(State())

    func set(_ c: CheckedContinuation<T, any Error>) {
        let early = state.withLock { s -> Result<T, any Error>? in
            guard let early = s.early else { s.continuation = c; return nil }
            s.finished = true
            return early
        }
        if let early { c.resume(with: early) }
    }

    func resume(_ result: Result<T, any Error>) {
        let waiting = state.withLock { s -> CheckedContinuation<T, any Error>? in
            guard !s.finished else { return nil }
            guard let c = s.continuation else {
                if s.early == nil { s.early = result }
                return nil
            }
            s.finished = true
            s.continuation = nil
            return c
        }
        waiting?.resume(with: result)
    }
}

enum MQTTLibrary {
    static let initialized: Bool = { mosquitto_lib_init(); return true }()
    static func initialize() { _ = initialized }
}

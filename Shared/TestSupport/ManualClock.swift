import Bus
import Model
import Synchronization

/// A clock that moves only when the test says so. Sleepers wake when
/// `advance` passes their deadline. As a `WallClock` it reads `startMs`
/// plus however far the test moved it.
public final class ManualClock: Clock, WallClock, Sendable {
    public struct Instant: InstantProtocol {
        public var offset: Duration
        public init(offset: Duration) { self.offset = offset }
        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        public static func < (a: Instant, b: Instant) -> Bool { a.offset < b.offset }
    }

    private struct Sleeper {
        let id: Int
        let deadline: Instant
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now = Instant(offset: .zero)
        var sleepers: [Sleeper] = []
        var nextID = 0
        var sleepWaiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Mutex(State())
    public let startMs: Int64

    public init(startMs: Int64 = 1_800_000_000_000) { self.startMs = startMs }

    public func nowMs() -> Int64 {
        startMs + now.offset.milliseconds
    }

    public var now: Instant { state.withLock { $0.now } }
    public var minimumResolution: Duration { .zero }

    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = state.withLock { s in defer { s.nextID += 1 }; return s.nextID }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let (ready, waiters) = state.withLock { s -> (Bool, [CheckedContinuation<Void, Never>]) in
                    if deadline <= s.now { return (true, []) }
                    s.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    let count = s.sleepers.count
                    let ready = s.sleepWaiters.filter { $0.count <= count }.map(\.continuation)
                    s.sleepWaiters.removeAll { $0.count <= count }
                    return (false, ready)
                }
                if ready { continuation.resume() }
                waiters.forEach { $0.resume() }
            }
        } onCancel: {
            let sleeper = state.withLock { s -> Sleeper? in
                guard let index = s.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return s.sleepers.remove(at: index)
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves time forward and wakes every sleeper whose deadline has come.
    public func advance(by duration: Duration) {
        let due = state.withLock { s -> [Sleeper] in
            s.now = s.now.advanced(by: duration)
            let now = s.now
            let due = s.sleepers.filter { $0.deadline <= now }
            s.sleepers.removeAll { $0.deadline <= now }
            return due
        }
        due.forEach { $0.continuation.resume() }
    }

    /// Returns once at least `count` tasks are asleep on this clock.
    public func waitForSleepers(_ count: Int = 1) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { s -> Bool in
                if s.sleepers.count >= count { return true }
                s.sleepWaiters.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }
}

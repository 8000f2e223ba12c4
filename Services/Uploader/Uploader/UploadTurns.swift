import Synchronization

/// One request at a time for every partition an instance runs, in turn,
/// oldest waiter first. The endpoint is the fleet's, the same for each
/// partition: racing one another, sixteen partitions' workers each sent
/// what had come since its last request, 1,300–1,700 requests for the
/// points one worker sends in about 100. Taking turns, each request
/// carries what came while the others sent: what an unpartitioned
/// service would send, and one request in flight as it has. A fleet
/// `syncNow` runs the partitions' attempts one after another too.
final class UploadTurns: Sendable {
    private let state = Mutex(State())

    private struct State {
        var taken = false
        var waiting: [(worker: ObjectIdentifier, continuation: CheckedContinuation<Bool, Never>)] = []
    }

    /// Returns true once it is `worker`'s turn (`end()` passes it on), or
    /// false, at once, when `stopped` says the worker is stopping, or when
    /// `withdraw` takes it out of the line: a stopping worker waits for no
    /// one's request.
    func begin(_ worker: ObjectIdentifier, unless stopped: () -> Bool) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let answer = state.withLock { s -> Bool? in
                // Under the lock, so a `withdraw` after the worker's stop finds it in line.
                if stopped() { return false }
                guard s.taken else { s.taken = true; return true }
                s.waiting.append((worker, continuation))
                return nil
            }
            if let answer { continuation.resume(returning: answer) }
        }
    }

    func end() {
        let next = state.withLock { s -> CheckedContinuation<Bool, Never>? in
            guard !s.waiting.isEmpty else { s.taken = false; return nil }
            return s.waiting.removeFirst().continuation  // the turn passes on still taken
        }
        next?.resume(returning: true)
    }

    /// Takes `worker` out of the line, if it waits there: its `begin` returns false.
    func withdraw(_ worker: ObjectIdentifier) {
        let waiting = state.withLock { s -> CheckedContinuation<Bool, Never>? in
            guard let i = s.waiting.firstIndex(where: { $0.worker == worker }) else { return nil }
            return s.waiting.remove(at: i).continuation
        }
        waiting?.resume(returning: false)
    }

    /// Callers waiting for their turn (tests watch it).
    var waitingCount: Int { state.withLock { $0.waiting.count } }
}

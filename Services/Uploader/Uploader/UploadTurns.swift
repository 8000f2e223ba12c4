import Synchronization

/// One request at a time for every partition an instance runs, in turn,
/// oldest waiter first. The endpoint is the fleet's, the same for each
/// partition: racing one another, sixteen partitions' workers each sent
/// what had come since its last request, 1,300–1,700 requests for the
/// points one worker sends in about 100. Taking turns, each request
/// carries what came while the others sent: what an unpartitioned
/// service would send, and one request in flight as it has.
final class UploadTurns: Sendable {
    private let state = Mutex(State())

    private struct State {
        var taken = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    /// Returns once it is this caller's turn; `end()` passes it on.
    func begin() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                guard s.taken else { s.taken = true; return true }
                s.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Callers waiting for their turn (tests watch it).
    var waitingCount: Int { state.withLock { $0.waiting.count } }

    func end() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard !s.waiting.isEmpty else { s.taken = false; return nil }
            return s.waiting.removeFirst()  // the turn passes on still taken
        }
        next?.resume()
    }
}

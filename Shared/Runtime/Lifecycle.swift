import Bus
import Dispatch
import FoundationEssentials
import TrackerLog
import Synchronization

/// A long-lived part of a service process (a connection, the query worker,
/// the health reporter, a service's own worker).
public protocol LongRunning: Sendable {
    /// Does the part's work until `stop()` is called, then winds it down and
    /// returns; throws what ended it early.
    func run() async throws
    /// Asks `run` to wind down and return. Idempotent; may come before `run`.
    func stop()
}

/// The process's parts, run as children of one task group with signal
/// handling as one more child. They start together, in the order given;
/// when SIGTERM or SIGINT arrives, or a part ends by itself, they are
/// stopped in reverse order, each only once the one after it has returned.
/// That order is the process's whole shutdown sequence.
public struct Lifecycle: Sendable {
    public struct Part: Sendable {
        public let name: String
        public let service: any LongRunning
        /// Where it runs, for a part that blocks on SQLite or HTTP; nil: the cooperative pool.
        public let executor: BlockingExecutor?
        /// `blocking`: the part waits on SQLite or HTTP without awaiting, so it
        /// gets a thread of its own instead of one of the pool's few (two on a
        /// two-core host), which the connections and health need.
        public init(_ name: String, _ service: any LongRunning, blocking: Bool = false) {
            self.name = name; self.service = service
            executor = blocking ? BlockingExecutor(name: name) : nil
        }
    }

    /// Why the parts were stopped.
    public enum Ending: Equatable, Sendable {
        case signal(Int32)
        /// A part returned or threw before any signal.
        case partEnded(String, error: String?)
    }

    public let parts: [Part]
    let logger: Logger
    let signals: @Sendable () async -> Int32

    public init(_ parts: [Part], logger: Logger, signals: @escaping @Sendable () async -> Int32 = { await Signals.waitForTermination() }) {
        self.parts = parts; self.logger = logger; self.signals = signals
    }

    public func run() async -> Ending {
        enum Finished: Sendable { case signal(Int32), part(Int, String?) }
        return await withTaskGroup(of: Finished.self) { group in
            for (index, part) in parts.enumerated() {
                group.addTask(executorPreference: part.executor) {
                    do { try await part.service.run(); return .part(index, nil) } catch { return .part(index, "\(error)") }
                }
            }
            group.addTask { .signal(await signals()) }
            var done = Set<Int>()
            let ending: Ending
            switch await group.next()! {
            case .signal(let number):
                ending = .signal(number)
                logger.info("stopping", ["signal": "\(number)"])
            case .part(let index, let error):
                done.insert(index)
                ending = .partEnded(parts[index].name, error: error)
                logger.error("a part of the service ended by itself; stopping", ["part": parts[index].name, "error": error ?? "none"])
            }
            for index in parts.indices.reversed() {
                parts[index].service.stop()
                while !done.contains(index), let finished = await group.next() {
                    if case .part(let other, let error) = finished {
                        done.insert(other)
                        if let error { logger.warning("a part failed while stopping", ["part": parts[other].name, "error": error]) }
                    }
                }
            }
            // The signal watcher, if a part's end came first.
            group.cancelAll()
            return ending
        }
    }
}

/// Runs the jobs of the tasks that prefer it on a serial queue of its own.
public final class BlockingExecutor: TaskExecutor {
    private let queue: DispatchQueue

    public init(name: String) { queue = DispatchQueue(label: "tracker.\(name)") }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// A one-shot "stop was asked" that `run` can wait for.
public final class StopRequest: Sendable {
    private struct State {
        var requested = false
        var nextID = 0
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
    }
    private let state = Mutex(State())

    public init() {}

    public var isRequested: Bool { state.withLock { $0.requested } }

    public func request() {
        let waiters = state.withLock { s in
            s.requested = true
            defer { s.waiters = [:] }
            return s.waiters
        }
        waiters.values.forEach { $0.resume() }
    }

    /// Returns once stop is asked, or when the waiting task is cancelled.
    public func wait() async {
        let id = state.withLock { s in defer { s.nextID += 1 }; return s.nextID }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { s -> Bool in
                    if s.requested || Task.isCancelled { return true }
                    s.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }

    /// Waits `duration`, or less if stop is asked meanwhile.
    public func wait(atMost duration: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                // Cancelled: the stop came first, which is what ends the wait.
                do { try await Task.sleep(for: duration) } catch {}
            }
            group.addTask { await self.wait() }
            await group.next()
            group.cancelAll()
        }
    }
}

/// An MQTT connection as a part: connects (after `after`, if given),
/// subscribes, and from then on the client reconnects by itself. Stopping
/// waits for what it published to be acknowledged, sends its farewell, and
/// disconnects, which ends its network thread.
public final class ConnectionPart: LongRunning {
    let client: MQTTClient
    let subscriptions: [String]
    let after: MQTTClient?
    let farewell: (@Sendable () -> MQTTMessage)?
    let connected: @Sendable () -> Void
    let logger: Logger
    let drainTimeout: Duration
    private let stopping = StopRequest()

    public init(_ client: MQTTClient, subscribing subscriptions: [String] = [], after: MQTTClient? = nil, drainTimeout: Duration = .seconds(5),
                farewell: (@Sendable () -> MQTTMessage)? = nil, logger: Logger, connected: @escaping @Sendable () -> Void = {}) {
        self.client = client; self.subscriptions = subscriptions; self.after = after; self.drainTimeout = drainTimeout
        self.farewell = farewell; self.logger = logger; self.connected = connected
    }

    public func run() async throws {
        if try await connect() { connected(); await stopping.wait() }
        await client.drain(timeout: drainTimeout)
        if let farewell {
            do { try await client.publishAndWait(farewell(), timeout: .seconds(3)) } catch {
                logger.warning("the last message before stopping was not acknowledged", ["error": "\(error)"])
            }
        }
        await client.disconnect(timeout: .seconds(3))
    }

    public func stop() { stopping.request() }

    /// Connects and subscribes, trying again until it works or stop is asked
    /// (false). Each wait is short, so a stop is never kept waiting long.
    private func connect() async throws -> Bool {
        var refusalsLogged = 0
        while !stopping.isRequested {
            do {
                if let after { try await after.connect(timeout: .seconds(1)) }
                try await client.connect(timeout: .seconds(1))
                if !subscriptions.isEmpty { try await client.subscribe(subscriptions, qos: .atLeastOnce) }
                return true
            } catch MQTTError.subscriptionRejected(let filter, let code) {
                if refusalsLogged % 12 == 0 { logger.error("broker refused a subscription; retrying", ["filter": filter, "code": "\(code)"]) }
                refusalsLogged += 1
                await stopping.wait(atMost: .seconds(5))
            } catch {
                // The client logs its own attempts (no broker, refused credentials).
                await stopping.wait(atMost: .milliseconds(200))
            }
        }
        return false
    }
}

import CMosquitto
import FoundationEssentials
import Dispatch
import TrackerLog
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Drives one libmosquitto client on a thread of its own, instead of
/// `mosquitto_loop_start`, for one reason: a hook between reading and writing.
///
/// The loop reads every packet already waiting (up to the number of QoS
/// messages in flight) before `mosquitto_loop_write` sends any PUBACK.
/// Calling `beforeAcknowledging` in between lets a service commit a
/// whole batch of messages in one transaction and still never acknowledge a
/// message it has not stored. Under load the batches grow by themselves; when
/// idle each message is its own batch.
///
/// The loop is the one owner of the connection: it makes the first attempt
/// and every reconnect, so no other thread ever drives the handle's socket.
final class NetworkLoop: @unchecked Sendable {
    // @unchecked: `mosq` is guarded by libmosquitto's own mutexes; our fields
    // are immutable or Mutex/atomic-protected.
    private let mosq: OpaquePointer
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let stopping = Mutex<DispatchTime?>(nil)
    private let lifetime = Mutex(Lifetime())
    private let callbacks = Mutex(Callbacks())

    /// The thread's life: not started, running on `thread`, or ended; who
    /// waits for the end. The end is known exactly, never guessed by a timeout.
    private struct Lifetime {
        var thread: pthread_t?
        var started = false
        var ended = false
        var joined = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    /// How long a stopping loop keeps flushing what is queued (the DISCONNECT
    /// above all) to a broker that does not read: then it ends regardless.
    static let flushLimit: DispatchTimeInterval = .seconds(5)
    /// Reading is held back until then (a failed batch's pause; see `holdReading`).
    private let readingHeldUntil = Mutex<DispatchTime?>(nil)

    /// The owner's callbacks, kept in one concrete struct. A Mutex of a bare
    /// closure type must not be read with `withLock { $0 }`: the generic
    /// inout rewraps the stored closure in two more reabstraction thunks on
    /// every call, so a hook read once per loop pass grew thousands of
    /// thunks deep within seconds (found profiling the motion service).
    private struct Callbacks {
        var beforeAcknowledging: (@Sendable () -> Bool)?
        var connector: (@Sendable () -> Int32)?
        var periodic: (interval: Double, body: @Sendable () -> Void)?
        var followUp: (interval: Double, body: @Sendable () -> Bool)?
        var readGate: (@Sendable () -> Bool)?
    }
    /// Set once, before `start`.
    nonisolated(unsafe) var logger: Logger?

    init(mosq: OpaquePointer) throws {
        self.mosq = mosq
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            throw MQTTError.library(operation: "wake pipe", code: errno, message: String(cString: strerror(errno)))
        }
        wakeRead = fds[0]
        wakeWrite = fds[1]
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        // "Threaded": publishes from any thread only queue; this loop writes.
        mosquitto_threaded_set(mosq, true)
    }

    deinit {
        close(wakeRead)
        close(wakeWrite)
    }

    /// Called between reading and writing on every pass (see the type's doc).
    /// Returning false withholds what the pass read from acknowledgement.
    func setBeforeAcknowledging(_ body: @escaping @Sendable () -> Bool) {
        callbacks.withLock { $0.beforeAcknowledging = body }
    }

    /// Called on the loop's thread every `interval` seconds while connected,
    /// before that pass's commit hook: periodic work shares the thread (and
    /// the batch) of the messages, so it needs no lock.
    func setPeriodic(every interval: Double, _ body: @escaping @Sendable () -> Void) {
        callbacks.withLock { $0.periodic = (interval, body) }
    }

    /// Work a periodic call left for later passes: after each one, `body`
    /// runs again every `interval` (before that pass's commit hook) until
    /// it returns false, so the loop reads between its slices. It waits
    /// while reading is held (see `setReadGate`, `holdReading`).
    func setFollowUp(every interval: Double, _ body: @escaping @Sendable () -> Bool) {
        callbacks.withLock { $0.followUp = (interval, body) }
    }

    /// Asked before every read: false holds incoming messages at the broker
    /// (back-pressure; the broker sends no more than the receive maximum
    /// unacknowledged). Writing, keep-alive and periodic work go on.
    func setReadGate(_ gate: @escaping @Sendable () -> Bool) {
        callbacks.withLock { $0.readGate = gate }
    }

    /// The first connection attempt (it sets host, port and properties;
    /// later attempts are `mosquitto_reconnect`).
    func setConnector(_ body: @escaping @Sendable () -> Int32) {
        callbacks.withLock { $0.connector = body }
    }

    /// Starts the loop's thread (once).
    func start(name: String) {
        guard lifetime.withLock({ l in defer { l.started = true }; return !l.started }) else { return }
        let context = Unmanaged.passRetained(StartContext(loop: self, name: name)).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { raw in
            let context = Unmanaged<StartContext>.fromOpaque(raw!).takeRetainedValue()
            _ = tracker_name_this_thread(context.name)
            context.loop.run()
            return nil
        }, context)
        if rc != 0 {
            Unmanaged<StartContext>.fromOpaque(context).release()
            logger?.error("cannot start the network thread", ["error": String(cString: strerror(rc))])
            finish()
            return
        }
        lifetime.withLock { $0.thread = thread }
    }

    private final class StartContext {
        let loop: NetworkLoop
        let name: String
        init(loop: NetworkLoop, name: String) { self.loop = loop; self.name = String(name.prefix(15)) }
    }

    /// Asks the loop to end once the socket is closed (after a DISCONNECT),
    /// or right away if there is none, and waits until its thread has ended:
    /// after this returns nothing runs on it any more.
    func stop() async {
        requestStop()
        guard !isLoopThread else { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ended = lifetime.withLock { l -> Bool in
                if l.ended || !l.started { return true }
                l.waiters.append(continuation)
                return false
            }
            if ended { continuation.resume() }
        }
    }

    /// `stop()` for a deinit, which cannot wait asynchronously: joins the
    /// thread (it ends within `flushLimit`), unless called on it.
    func stopAndJoin() {
        requestStop()
        let thread = lifetime.withLock { l -> pthread_t? in
            guard let thread = l.thread, !l.joined else { return nil }
            l.joined = true
            return thread
        }
        guard let thread else { return }
        if pthread_equal(thread, pthread_self()) != 0 { pthread_detach(thread) } else { pthread_join(thread, nil) }
    }

    /// Ends the loop once the socket is closed, without reconnecting: for a
    /// session another connection took over, which must not be taken back.
    /// Callable on the loop's own thread.
    func endWithoutReconnecting() { requestStop() }

    private func requestStop() {
        stopping.withLock { $0 = $0 ?? .now() + Self.flushLimit }
        wake()
    }

    /// Its thread was started and has not ended yet.
    var isRunning: Bool { lifetime.withLock { $0.started && !$0.ended } }

    var isLoopThread: Bool {
        lifetime.withLock { l in l.thread.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
    }

    /// Holds incoming messages at the broker for `duration` (a batch that could
    /// not be stored waits before it comes back), without stopping the thread:
    /// keep-alive, writing and periodic work go on.
    func holdReading(for duration: Duration) {
        let until = DispatchTime.now() + duration.seconds
        readingHeldUntil.withLock { $0 = max($0 ?? until, until) }
        wake()
    }

    private var readingIsHeld: Bool {
        readingHeldUntil.withLock { held in
            guard let until = held else { return false }
            if DispatchTime.now() >= until { held = nil; return false }
            return true
        }
    }

    private func finish() {
        let waiters = lifetime.withLock { l in
            l.ended = true
            defer { l.waiters = [] }
            return l.waiters
        }
        waiters.forEach { $0.resume() }
    }

    /// Wakes the loop so it writes what another thread queued.
    func wake() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    private var isStopping: Bool { stopping.withLock { $0 != nil } }

    /// Stopping, and what is queued has had its time to leave.
    private var mustEndNow: Bool { stopping.withLock { $0.map { DispatchTime.now() >= $0 } ?? false } }

    private func run() {
        // Known before the first callback, so the owner's checks hold from the start.
        lifetime.withLock { $0.thread = pthread_self() }
        defer { finish() }
        var reconnectAttempt = 0
        var everAttempted = false
        var pollFailures = 0
        var nextTick = DispatchTime.now()
        // When the periodic call's follow-up runs next; nil when it has nothing left.
        var nextFollowUp: DispatchTime?
        while true {
            let socket = mosquitto_socket(mosq)
            if socket < 0 {
                if isStopping { return }
                if everAttempted {
                    // Connection lost: reconnect with backoff (1 s … 10 s). Only stop()
                    // cuts it short: publishes wake the loop too, and must not turn
                    // the backoff into a burst of failing attempts.
                    reconnectAttempt += 1
                    let deadline = DispatchTime.now() + .seconds(min(10, reconnectAttempt))
                    while !isStopping, DispatchTime.now() < deadline {
                        waitForWake(milliseconds: Int32(max(1, (deadline.uptimeNanoseconds - min(deadline.uptimeNanoseconds, DispatchTime.now().uptimeNanoseconds)) / 1_000_000)))
                    }
                    if isStopping { return }
                }
                let rc = everAttempted ? mosquitto_reconnect(mosq) : (callbacks.withLock { $0.connector }?() ?? MOSQ_ERR_INVAL.rawValue)
                everAttempted = true
                if rc == MOSQ_ERR_SUCCESS.rawValue {
                    reconnectAttempt = 0
                } else if reconnectAttempt == 0 || reconnectAttempt % 10 == 0 {
                    logger?.warning("broker not reachable, retrying", ["error": MQTTClient.describe(rc), "attempt": "\(reconnectAttempt + 1)"])
                }
                continue
            }
            // Stopping: finish once nothing (such as a DISCONNECT) is left to send.
            if isStopping, !mosquitto_want_write(mosq) || mustEndNow { return }
            let reading = !readingIsHeld && (callbacks.withLock { $0.readGate }?() ?? true)
            var fds = [
                pollfd(fd: socket, events: (reading ? Int16(POLLIN) : 0) | (mosquitto_want_write(mosq) ? Int16(POLLOUT) : 0), revents: 0),
                pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
            ]
            let (tick, followUp) = callbacks.withLock { ($0.periodic, $0.followUp) }
            let untilTick = tick.map { _ in Self.milliseconds(until: nextTick) } ?? 1_000
            // A follow-up waits while reading is held: it must not shorten that wait to a spin.
            let untilFollowUp = reading ? nextFollowUp.map { Self.milliseconds(until: $0) } ?? 1_000 : 1_000
            // Held back: look again soon, the gate opens as output drains.
            let ready = poll(&fds, 2, min(reading ? 1_000 : 20, max(0, min(untilTick, untilFollowUp))))
            if ready < 0 {
                guard errno != EINTR else { continue }
                // Not a signal: back off instead of spinning on the same error.
                pollFailures += 1
                if pollFailures == 1 || pollFailures % 100 == 0 {
                    logger?.error("poll failed", ["error": String(cString: strerror(errno)), "times": "\(pollFailures)"])
                }
                waitForWake(milliseconds: 100)
                continue
            }
            pollFailures = 0
            if fds[1].revents != 0 { drainWakePipe() }
            if fds[0].revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                // Woken by input: let the threads producing the rest of a
                // burst run first (on an idle core this returns at once).
                // Where threads outnumber cores (partitions, instances) the
                // thread then reads the burst as one batch instead of
                // committing every few messages apart; see
                // docs/benchmarks/2026-12-06-yield.md.
                if fds[0].revents & Int16(POLLIN) != 0 { sched_yield() }
                // libmosquitto 2.0 reads about one packet per call here: keep
                // reading while more is waiting, so a burst becomes one batch.
                var reads = 0
                repeat {
                    if mosquitto_loop_read(mosq, 1) != MOSQ_ERR_SUCCESS.rawValue { break }
                    reads += 1
                } while reads < Self.maxBatch && Self.readable(mosquitto_socket(mosq))
            }
            if let tick, DispatchTime.now() >= nextTick {
                tick.body()
                nextTick = DispatchTime.now() + tick.interval
                // A follow-up already due keeps its time: ticks as often as its interval must not starve it.
                nextFollowUp = nextFollowUp ?? followUp.map { DispatchTime.now() + $0.interval }
            } else if reading, let due = nextFollowUp, DispatchTime.now() >= due {
                // Not while reading is held: output is behind, or the last batch could not be stored.
                nextFollowUp = followUp.flatMap { $0.body() ? DispatchTime.now() + $0.interval : nil }
            }
            // Everything read so far is handled: let the owner commit it
            // before any acknowledgement leaves.
            if callbacks.withLock({ $0.beforeAcknowledging })?() == false {
                // The owner could not store the batch: drop the connection with
                // its queued acknowledgements unsent (reconnecting discards
                // them); the broker redelivers the batch on the new connection.
                logger?.warning("batch not stored; reconnecting without acknowledging it")
                _ = mosquitto_reconnect(mosq)
                continue
            }
            if mosquitto_socket(mosq) >= 0, mosquitto_want_write(mosq) {
                _ = mosquitto_loop_write(mosq, 1)
            }
            if mosquitto_socket(mosq) >= 0 { _ = mosquitto_loop_misc(mosq) }
        }
    }

    /// Read calls per batch before the owner must commit (each call may handle
    /// several packets; the receive maximum bounds how many are in flight).
    static let maxBatch = 512

    /// Milliseconds from now until `time`, rounded up (a poll that wakes a
    /// fraction early would spin until it is due), 0 once it has passed.
    private static func milliseconds(until time: DispatchTime) -> Int32 {
        Int32(clamping: (time.uptimeNanoseconds &- min(time.uptimeNanoseconds, DispatchTime.now().uptimeNanoseconds) + 999_999) / 1_000_000)
    }

    private static func readable(_ socket: Int32) -> Bool {
        guard socket >= 0 else { return false }
        var fd = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
        return poll(&fd, 1, 0) > 0 && fd.revents & Int16(POLLIN) != 0
    }

    private func waitForWake(milliseconds: Int32) {
        var fd = pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)
        if poll(&fd, 1, milliseconds) > 0 { drainWakePipe() }
    }

    private func drainWakePipe() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(wakeRead, &buffer, buffer.count) > 0 {}
    }
}

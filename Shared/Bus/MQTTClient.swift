import CMosquitto
import Dispatch
import FoundationEssentials
import Glibc
import TrackerLog
import Synchronization

/// An MQTT 5 client over libmosquitto's own network thread.
///
/// Incoming messages are handed to one synchronous handler *on the network
/// thread*. That is deliberate: libmosquitto (2.0) queues the PUBACK for a
/// QoS 1 message before calling back but only writes it once the callback
/// returns, so a handler that commits before returning never acknowledges a
/// message it has not stored. A service that needs that guarantee does its
/// work in the handler; others can use `messages()` for an async sequence.
///
/// Outgoing QoS 1 messages are never forgotten: libmosquitto keeps every
/// unacknowledged one across a dropped connection (and one published while
/// disconnected) and sends it again after reconnecting, so an acknowledgement
/// closure waits for the broker's PUBACK, however many reconnects that takes.
/// Closures are keyed by libmosquitto's 16-bit message id, so at most
/// `maxOutstanding` messages are handed to the library at once; the rest wait
/// here, in order, and an id is never reused while its closure waits.
public final class MQTTClient: @unchecked Sendable {
    // @unchecked: `mosq` is used under libmosquitto's own locking, and all of
    // our mutable state lives in `state`, a Mutex.
    public typealias Handler = @Sendable (MQTTMessage) -> Void
    public typealias Acknowledgement = @Sendable (Result<Void, MQTTError>) -> Void

    public let options: MQTTOptions
    let mosq: OpaquePointer
    let state = Mutex(State())
    let loop: NetworkLoop
    let logger: Logger?

    struct State {
        var connected = false
        var loopStarted = false
        var closing = false
        var beforeAcknowledging: (@Sendable () -> Bool)?
        var connectWaiters: [Int: CheckedContinuation<Void, any Error>] = [:]
        var nextWaiterID = 0
        /// Each QoS 1 message handed to the library, by message id: its topic (to name a refusal) and its closure.
        var acks: [Int32: (topic: String, ack: Acknowledgement)] = [:]
        var onRefused: (@Sendable (_ topic: String, _ code: Int32) -> Void)?
        /// Waiting for room below `maxOutstanding`, oldest first.
        var backlog = Backlog()
        var subscribeWaiters: [Int32: (filters: [String], continuation: CheckedContinuation<Void, any Error>)] = [:]
        var subscriptions: [(filter: String, qos: QoS)] = []
        /// The re-subscriptions of the current connection not yet acknowledged.
        var resubscribing: Set<Int32> = []
        var handler: Handler?
        var onConnect: (@Sendable (_ reconnect: Bool) -> Void)?
        var onTakenOver: (@Sendable () -> Void)?
        var requests: [[UInt8]: CheckedContinuation<MQTTMessage, any Error>] = [:]
        var connectCount = 0
        var drainWaiters: [CheckedContinuation<Void, Never>] = []
        /// Publishers waiting for the unacknowledged to fall to half their limit.
        var roomWaiters: [(limit: Int, continuation: CheckedContinuation<Void, Never>)] = []
        /// Connected, and libmosquitto's resends of the messages the last
        /// connection left unacknowledged are queued: new QoS 1 messages may
        /// go to the library. Until then they wait in `backlog`, in order.
        var resendsQueued = false

        var inFlight: Int { acks.count + backlog.count }

        /// The publishers with room again (the unacknowledged at half their limit), taken out.
        mutating func takeRoomWaiters(all: Bool = false) -> [CheckedContinuation<Void, Never>] {
            guard !roomWaiters.isEmpty else { return [] }
            let count = inFlight
            var ready: [CheckedContinuation<Void, Never>] = []
            roomWaiters.removeAll { waiter in
                guard all || count <= waiter.limit / 2 else { return false }
                ready.append(waiter.continuation)
                return true
            }
            return ready
        }
    }

    public init(_ options: MQTTOptions) throws {
        MQTTLibrary.initialize()
        self.options = options
        self.logger = options.logger
        guard let mosq = mosquitto_new(options.clientID, options.cleanStart, nil) else {
            throw MQTTError.library(operation: "new", code: -1, message: "mosquitto_new failed for client id \(options.clientID)")
        }
        do {
            loop = try NetworkLoop(mosq: mosq)
        } catch {
            mosquitto_destroy(mosq)
            throw error
        }
        self.mosq = mosq
        mosquitto_user_data_set(mosq, Unmanaged.passUnretained(self).toOpaque())
        try check("set protocol", mosquitto_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION, options.protocolVersion.rawValue))
        try check("set tcp_nodelay", mosquitto_int_option(mosq, MOSQ_OPT_TCP_NODELAY, 1))
        if options.protocolVersion == .v5 {
            // libmosquitto's default of 20 unacknowledged QoS 1 messages each
            // way makes throughput a function of round-trip time. The
            // broker's CONNACK may still replace the send maximum (see sendWindow).
            try check("set receive maximum", mosquitto_int_option(mosq, MOSQ_OPT_RECEIVE_MAXIMUM, options.receiveWindow))
            try check("set send maximum", mosquitto_int_option(mosq, MOSQ_OPT_SEND_MAXIMUM, options.sendWindow))
        }
        if let username = options.username {
            try check("set credentials", mosquitto_username_pw_set(mosq, username, options.password))
        }
        if let will = options.will {
            let rc = will.payload.withUnsafeBytes {
                mosquitto_will_set_v5(mosq, will.topic, Int32($0.count), $0.baseAddress, will.qos.rawValue, will.retain, nil)
            }
            try check("set will", rc)
        }
        mosquitto_connect_v5_callback_set(mosq, onConnectCallback)
        mosquitto_disconnect_v5_callback_set(mosq, onDisconnectCallback)
        mosquitto_publish_v5_callback_set(mosq, onPublishCallback)
        mosquitto_subscribe_v5_callback_set(mosq, onSubscribeCallback)
        mosquitto_message_v5_callback_set(mosq, onMessageCallback)
        loop.setBeforeAcknowledging { [weak self] in
            guard let self else { return true }
            let stored = state.withLock { $0.beforeAcknowledging }?() ?? true
            releaseAfterConnect()
            return stored
        }
        loop.setConnector { [weak self] in self?.connectOnce() ?? MOSQ_ERR_INVAL.rawValue }
        loop.logger = options.logger
    }

    /// The network thread's name (Linux keeps 15 bytes): the client id's
    /// tail without the "tracker-" every service's shares, so `top -H` and
    /// a profile tell a partition's session (`filter-p3`) from the instance's
    /// output (`filter-a-out`).
    static func threadName(_ clientID: String) -> String {
        let id = clientID.hasPrefix("tracker-") ? clientID.dropFirst("tracker-".count) : Substring(clientID)
        return String(id.utf8.count <= 15 ? id : Substring(decoding: id.utf8.suffix(15), as: UTF8.self))
    }

    deinit {
        // No callback may reach this object from here on; then the thread must end
        // before the handle it uses is destroyed.
        mosquitto_user_data_set(mosq, nil)
        loop.stopAndJoin()
        mosquitto_destroy(mosq)
    }

    // MARK: Handlers

    /// Sets the synchronous handler called on the network thread for every
    /// message that is not a reply to one of our requests.
    public func setHandler(_ handler: @escaping Handler) {
        state.withLock { $0.handler = handler }
    }

    /// MQTT 5's reason code for a session another connection took over.
    static let sessionTakenOver: Int32 = 0x8E

    /// Called (on the network thread) when another connection with this
    /// client id took the session over; the client then stays disconnected.
    public func setOnTakenOver(_ hook: @escaping @Sendable () -> Void) {
        state.withLock { $0.onTakenOver = hook }
    }

    /// Called on the network thread after every successful (re)connect,
    /// before any message of that connection is handled.
    public func setOnConnect(_ hook: @escaping @Sendable (_ reconnect: Bool) -> Void) {
        state.withLock { $0.onConnect = hook }
    }

    /// Called on the network thread after each batch of incoming messages has
    /// been handed to the handler and before their acknowledgements are
    /// written: commit the batch here. Returning false withholds the batch's
    /// acknowledgements: the connection is dropped and made again, and the
    /// broker redelivers every message of the batch.
    public func setBeforeAcknowledging(_ hook: @escaping @Sendable () -> Bool) {
        state.withLock { $0.beforeAcknowledging = hook }
    }

    /// Called (on the network thread) for every QoS 1 message the broker
    /// refuses for good, with its topic and reason code.
    public func setOnRefused(_ hook: @escaping @Sendable (_ topic: String, _ code: Int32) -> Void) {
        state.withLock { $0.onRefused = hook }
    }

    /// Asked before every read on the network thread; while it says false,
    /// incoming messages wait at the broker (see `NetworkLoop.setReadGate`).
    public func setReadGate(_ gate: @escaping @Sendable () -> Bool) {
        loop.setReadGate(gate)
    }

    /// Holds incoming messages at the broker for `duration`; the network
    /// thread goes on with keep-alive, writing and periodic work.
    public func holdReading(for duration: Duration) {
        loop.holdReading(for: duration)
    }

    /// Called on this client's network thread (its callbacks and hooks are).
    public var isOnNetworkThread: Bool { loop.isLoopThread }

    /// The network thread was started and has not ended yet (`disconnect`
    /// returns only once it has).
    public var isRunning: Bool { loop.isRunning }

    /// Runs `body` on the network thread every `interval` while connected,
    /// just before the pass's `beforeAcknowledging` hook.
    public func setPeriodic(every interval: Duration, _ body: @escaping @Sendable () -> Void) {
        loop.setPeriodic(every: interval.seconds, body)
    }

    /// Work the periodic call left for later passes: after each periodic
    /// call, `body` runs on the network thread every `interval` until it
    /// returns false, reading what arrives between its calls.
    public func setFollowUp(every interval: Duration, _ body: @escaping @Sendable () -> Bool) {
        loop.setFollowUp(every: interval.seconds, body)
    }

    /// Messages as an async sequence. Installs the handler, so use one or the other.
    public func messages() -> AsyncStream<MQTTMessage> {
        let (stream, continuation) = AsyncStream.makeStream(of: MQTTMessage.self, bufferingPolicy: .unbounded)
        setHandler { continuation.yield($0) }
        return stream
    }

    public var isConnected: Bool { state.withLock { $0.connected } }

    /// Connected, and every subscription of this connection acknowledged:
    /// messages published from now on reach this client.
    public var isSubscribed: Bool { state.withLock { $0.connected && $0.resubscribing.isEmpty } }

    // MARK: Connection

    /// Starts the network thread, which owns connecting: it connects, and
    /// after any drop reconnects by itself (1 s … 10 s backoff) and
    /// re-subscribes. Waits for the broker's CONNACK. The first attempt's
    /// failure (no broker, refused credentials) or `timeout` throws while the
    /// thread keeps trying; calling this again waits for the connection.
    public func connect(timeout: Duration = .seconds(10)) async throws {
        let id = state.withLock { s in defer { s.nextWaiterID += 1 }; return s.nextWaiterID }
        try await expiring(after: timeout, { [weak self] in
            self?.state.withLock { $0.connectWaiters.removeValue(forKey: id) }?
                .resume(throwing: MQTTError.timedOut(operation: "connect"))
        }) {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let (alreadyConnected, start) = state.withLock { s -> (Bool, Bool) in
                    if s.connected { return (true, false) }
                    s.connectWaiters[id] = continuation
                    defer { s.loopStarted = true }
                    return (false, !s.loopStarted)
                }
                if alreadyConnected { continuation.resume(); return }
                if start { loop.start(name: Self.threadName(options.clientID)) }
            }
        }
    }

    /// One connection attempt, on the network thread (the loop's first
    /// attempt; later ones are `mosquitto_reconnect`, which keeps these
    /// settings and properties).
    func connectOnce() -> Int32 {
        var props: OpaquePointer? = nil
        defer { mosquitto_property_free_all(&props) }
        if options.protocolVersion == .v5, options.sessionExpirySec > 0 {
            _ = mosquitto_property_add_int32(&props, Int32(MQTT_PROP_SESSION_EXPIRY_INTERVAL.rawValue), options.sessionExpirySec)
        }
        let rc = mosquitto_connect_bind_v5(mosq, options.host, options.port, options.keepAliveSec, nil, props)
        if rc != MOSQ_ERR_SUCCESS.rawValue { connectAttemptFailed(rc) }
        return rc
    }

    /// Called by the loop when an attempt fails before any CONNACK.
    func connectAttemptFailed(_ rc: Int32) {
        let error = MQTTError.library(operation: "connect to \(options.host):\(options.port)", code: rc, message: Self.describe(rc))
        let waiters = state.withLock { s in defer { s.connectWaiters = [:] }; return s.connectWaiters }
        waiters.values.forEach { $0.resume(throwing: error) }
    }

    /// Waits until every QoS 1 message already handed to us is acknowledged
    /// (or `timeout` passes), then disconnects and stops the network thread.
    public func disconnect(timeout: Duration = .seconds(10)) async {
        await drain(timeout: timeout)
        state.withLock { $0.closing = true }
        mosquitto_disconnect_v5(mosq, 0, nil)
        await loop.stop()
        failAllWaiters(.connectionLost(operation: "disconnect"), includingAcknowledgements: true)
    }

    /// Waits until no QoS 1 publish is awaiting its acknowledgement, across
    /// reconnects, or until `timeout`.
    public func drain(timeout: Duration = .seconds(10)) async {
        await expiring(after: timeout, { [weak self] in
            let waiters: [CheckedContinuation<Void, Never>] =
                self?.state.withLock { s in defer { s.drainWaiters = [] }; return s.drainWaiters } ?? []
            waiters.forEach { $0.resume() }
        }) {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let done = state.withLock { s -> Bool in
                    if s.acks.isEmpty && s.backlog.isEmpty { return true }
                    s.drainWaiters.append(continuation)
                    return false
                }
                if done { continuation.resume() }
            }
        }
    }

    /// Number of QoS 1 publishes not yet acknowledged (handed to the
    /// library or waiting for room).
    public var inFlight: Int { state.withLock { $0.inFlight } }

    /// `publish`, once fewer than `limit` QoS 1 messages are unacknowledged.
    /// When full it waits, without spinning, until half of them are: a
    /// publisher that must not outrun the broker (a bench, a replay) wakes
    /// once per half window, and leaves the cores to the system it feeds.
    public func publish(inFlightBelow limit: Int, _ message: MQTTMessage, acknowledged: Acknowledgement? = nil) async throws {
        precondition(limit > 0, "a window of at least one message")
        // A closed client acknowledges nothing more: no waiting on it (`publish` says why).
        if state.withLock({ !$0.closing && $0.inFlight >= limit }) {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let full = state.withLock { s -> Bool in
                    guard !s.closing, s.inFlight >= limit else { return false }
                    s.roomWaiters.append((limit, continuation))
                    return true
                }
                if !full { continuation.resume() }
            }
        }
        try publish(message, acknowledged: acknowledged)
    }

    /// At most this many QoS 1 messages are handed to libmosquitto at once,
    /// well below its 65,535 message ids.
    public static let maxOutstanding = 16_384

    // MARK: Publish

    /// Queues a message. With `acknowledged`, that closure runs (on the
    /// network thread) once the broker acknowledges it — after any number of
    /// reconnects — or when the client is closed for good. QoS 1 messages go
    /// out in the order they were published. Throws only for a message the
    /// library refuses outright (bad topic, too large), or for QoS 0 while
    /// disconnected.
    public func publish(_ message: MQTTMessage, acknowledged: Acknowledgement? = nil) throws {
        let rc = state.withLock { enqueue(message, acknowledged, in: &$0) }
        try check(publishing: message, rc)
        if !loop.isLoopThread { loop.wake() }
        if message.qos == .atMostOnce { acknowledged?(.success(())) }
    }

    /// Several messages in order, as `publish` would each, under one lock and
    /// with one wake-up of the network thread: a batch's output costs one
    /// round of both, not one a message (many threads publishing on one
    /// connection fought over the lock). Returns those refused, with why.
    public func publish(all messages: [(MQTTMessage, Acknowledgement?)]) -> [(MQTTMessage, any Error)] {
        guard !messages.isEmpty else { return [] }
        var refused: [(MQTTMessage, any Error)] = []
        let results: [Int32] = state.withLock { s in messages.map { enqueue($0, $1, in: &s) } }
        for ((message, ack), rc) in zip(messages, results) {
            do {
                try check(publishing: message, rc)
                if message.qos == .atMostOnce { ack?(.success(())) }
            } catch { refused.append((message, error)) }
        }
        if !loop.isLoopThread { loop.wake() }
        return refused
    }

    /// One message handed on under the state lock: QoS 0 straight to the
    /// library; QoS 1 behind a backlog waits in line (order matters to
    /// consumers that skip old seqs), and so until a new connection's resends
    /// are queued (libmosquitto resends the last connection's unacknowledged
    /// messages only once the CONNACK is read, and a message handed to it
    /// before would overtake them).
    func enqueue(_ message: MQTTMessage, _ acknowledged: Acknowledgement?, in s: inout State) -> Int32 {
        if message.qos == .atMostOnce { return send(message) }
        let ack = acknowledged ?? { _ in }
        guard s.resendsQueued, s.backlog.isEmpty, s.acks.count < Self.maxOutstanding else {
            s.backlog.append(message, ack)
            return MOSQ_ERR_SUCCESS.rawValue
        }
        return send(message, registering: ack, in: &s)
    }

    /// Hands one message to libmosquitto; the caller holds the state lock,
    /// so the PUBACK callback cannot run before the closure is registered.
    /// A QoS 1 message published while disconnected is queued by the library
    /// (which answers NO_CONN) and sent after the reconnect: that is success.
    func send(_ message: MQTTMessage, registering ack: Acknowledgement? = nil, in s: inout State) -> Int32 {
        var mid: Int32 = 0
        let rc = send(message, mid: &mid)
        let queued = rc == MOSQ_ERR_SUCCESS.rawValue || (rc == MOSQ_ERR_NO_CONN.rawValue && message.qos == .atLeastOnce)
        guard queued else { return rc }
        if message.qos == .atLeastOnce, let ack {
            if s.acks[mid] != nil { logger?.error("message id reused while its acknowledgement waits", ["mid": "\(mid)"]) }
            s.acks[mid] = (message.topic, ack)
        }
        return MOSQ_ERR_SUCCESS.rawValue
    }

    func send(_ message: MQTTMessage) -> Int32 {
        var mid: Int32 = 0
        return send(message, mid: &mid)
    }

    func send(_ message: MQTTMessage, mid: inout Int32) -> Int32 {
        var props: OpaquePointer? = nil
        defer { mosquitto_property_free_all(&props) }
        if let responseTopic = message.responseTopic {
            let rc = mosquitto_property_add_string(&props, Int32(MQTT_PROP_RESPONSE_TOPIC.rawValue), responseTopic)
            if rc != MOSQ_ERR_SUCCESS.rawValue { return rc }
        }
        if let correlation = message.correlationData {
            let rc = correlation.withUnsafeBytes {
                mosquitto_property_add_binary(&props, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), $0.baseAddress, UInt16($0.count))
            }
            if rc != MOSQ_ERR_SUCCESS.rawValue { return rc }
        }
        return message.payload.withUnsafeBytes {
            mosquitto_publish_v5(mosq, &mid, message.topic, Int32($0.count), $0.baseAddress,
                                 message.qos.rawValue, message.retain, props)
        }
    }

    func check(publishing message: MQTTMessage, _ rc: Int32) throws {
        guard rc != MOSQ_ERR_SUCCESS.rawValue else { return }
        if rc == MOSQ_ERR_NO_CONN.rawValue { throw MQTTError.notConnected(operation: "publish to \(message.topic)") }
        throw MQTTError.library(operation: "publish to \(message.topic)", code: rc, message: Self.describe(rc))
    }

    /// Publishes and waits for the broker's acknowledgement (QoS 1) or the send (QoS 0).
    public func publishAndWait(_ message: MQTTMessage, timeout: Duration = .seconds(10)) async throws {
        let box = ResumeOnce<Void>()
        try await expiring(after: timeout, { box.resume(.failure(MQTTError.timedOut(operation: "publish to \(message.topic)"))) }) {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                box.set(continuation)
                do {
                    try publish(message) { result in box.resume(result.mapError { $0 }) }
                } catch {
                    box.resume(.failure(error))
                }
            }
        }
    }

    // MARK: Subscribe

    /// Subscribes and waits for the SUBACK. The filters are remembered and
    /// subscribed again after every reconnect.
    public func subscribe(_ filters: [String], qos: QoS = .atLeastOnce, timeout: Duration = .seconds(10)) async throws {
        for filter in filters where mosquitto_sub_topic_check(filter) != MOSQ_ERR_SUCCESS.rawValue {
            throw MQTTError.invalidTopic(filter)
        }
        state.withLock { s in
            for filter in filters where !s.subscriptions.contains(where: { $0.filter == filter }) {
                s.subscriptions.append((filter, qos))
            }
        }
        // The timer fails this subscribe only, found by its message id.
        let mid = Mutex<Int32?>(nil)
        try await expiring(after: timeout, { [weak self] in
            guard let id = mid.withLock({ $0 }) else { return }
            self?.state.withLock { $0.subscribeWaiters.removeValue(forKey: id) }?
                .continuation.resume(throwing: MQTTError.timedOut(operation: "subscribe"))
        }) {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let rc = state.withLock { s -> Int32 in
                    var id: Int32 = 0
                    let rc = subscribeMultiple(filters, qos: qos, mid: &id)
                    if rc == MOSQ_ERR_SUCCESS.rawValue {
                        s.subscribeWaiters[id] = (filters, continuation)
                        mid.withLock { $0 = id }
                    }
                    return rc
                }
                loop.wake()
                if rc != MOSQ_ERR_SUCCESS.rawValue {
                    continuation.resume(throwing: MQTTError.library(operation: "subscribe", code: rc, message: Self.describe(rc)))
                }
            }
        }
    }

    func subscribeMultiple(_ filters: [String], qos: QoS, mid: inout Int32) -> Int32 {
        var cStrings = filters.map { strdup($0) }
        defer { cStrings.forEach { free($0) } }
        return cStrings.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: UnsafeMutablePointer<CChar>?.self, capacity: buffer.count) { base in
                mosquitto_subscribe_multiple(mosq, &mid, Int32(filters.count), base, qos.rawValue, 0, nil)
            }
        }
    }

    // MARK: Request / response

    /// Sends a request with a v5 response topic and random correlation data
    /// and waits for the matching reply. The caller must be subscribed to
    /// `responseTopic`. A request the broker refuses (PUBACK 0x87: the ACL
    /// denies the topic) fails at once with `publishRefused`.
    public func request(_ message: MQTTMessage, responseTopic: String, timeout: Duration = .seconds(10)) async throws -> MQTTMessage {
        var message = message
        let correlation = (0..<16).map { _ in UInt8.random(in: 0...255) }
        message.responseTopic = responseTopic
        message.correlationData = correlation
        let topic = message.topic
        return try await expiring(after: timeout, { [weak self] in
            self?.state.withLock { s in s.requests.removeValue(forKey: correlation) }?
                .resume(throwing: MQTTError.timedOut(operation: "request to \(topic)"))
        }) {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<MQTTMessage, any Error>) in
                state.withLock { $0.requests[correlation] = continuation }
                do {
                    try publish(message) { [weak self] result in
                        guard case .failure(let error) = result else { return }
                        self?.state.withLock { $0.requests.removeValue(forKey: correlation) }?.resume(throwing: error)
                    }
                } catch {
                    state.withLock { $0.requests.removeValue(forKey: correlation) }?.resume(throwing: error)
                }
            }
        }
    }

    // MARK: Helpers

    func check(_ operation: String, _ rc: Int32) throws {
        guard rc == MOSQ_ERR_SUCCESS.rawValue else {
            throw MQTTError.library(operation: operation, code: rc, message: Self.describe(rc))
        }
    }

    static func describe(_ rc: Int32) -> String {
        if rc == MOSQ_ERR_ERRNO.rawValue { return String(cString: strerror(errno)) }
        return String(cString: mosquitto_strerror(rc))
    }

    /// `body`, with `expire` called if it has not returned after `timeout`
    /// (it fails the waiter `body` registered, so `body` then returns).
    func expiring<T: Sendable>(after timeout: Duration, _ expire: @escaping @Sendable () -> Void,
                               _ body: () async throws -> T) async throws -> T {
        try await withTimer(timeout, expire) { () async -> Result<T, any Error> in
            do { return .success(try await body()) } catch { return .failure(error) }
        }.get()
    }

    func expiring(after timeout: Duration, _ expire: @escaping @Sendable () -> Void, _ body: () async -> Void) async {
        await withTimer(timeout, expire, body)
    }

    /// The timer is a dispatch timer, cancelled (and freed) as soon as `body`
    /// returns. Not a sleeping child task: a cancelled `Task.sleep` keeps its
    /// timer until the deadline, so thousands of requests a second each
    /// waiting 10 s held hundreds of thousands of them (tracker-http grew to
    /// 150 MB and slowed). `expire` may still run just after `body` returned;
    /// every one only fails a waiter that is still registered.
    private func withTimer<T: Sendable>(_ timeout: Duration, _ expire: @escaping @Sendable () -> Void, _ body: () async -> T) async -> T {
        let timer = DispatchSource.makeTimerSource(queue: Self.timers)
        timer.schedule(deadline: .now() + .milliseconds(Int(min(timeout, .seconds(86_400)).milliseconds)))
        timer.setEventHandler(handler: expire)
        timer.resume()
        defer { timer.cancel() }
        return await body()
    }

    private static let timers = DispatchQueue(label: "tracker.mqtt.timers")

    static func from(_ userdata: UnsafeMutableRawPointer?) -> MQTTClient? {
        userdata.map { Unmanaged<MQTTClient>.fromOpaque($0).takeUnretainedValue() }
    }
}

import CMosquitto
import Dispatch
import FoundationEssentials
import Glibc
import TrackerLog
import Synchronization

/// What libmosquitto reports, on the network thread.
extension MQTTClient {
    // MARK: Callbacks (network thread)

    /// Stands for re-subscriptions not yet sent (no real message id is negative).
    static let resubscribePending: Int32 = -1

    func handleConnect(rc: Int32) {
        let (waiters, subscriptions, hook, count) = state.withLock { s in
            defer { s.connectWaiters = [:] }
            if rc == 0 {
                s.connected = true
                s.connectCount += 1
                // Not subscribed until the re-subscriptions below are acknowledged: a
                // placeholder id closes the window in which `isSubscribed` would say
                // yes (health once said online there, and a fix sent then was lost).
                if !s.subscriptions.isEmpty { s.resubscribing = [Self.resubscribePending] }
            }
            return (s.connectWaiters, s.subscriptions, s.onConnect, s.connectCount)
        }
        guard rc == 0 else {
            let reason = String(cString: mosquitto_reason_string(rc))
            logger?.warning("broker refused the connection", ["reason": reason, "code": "\(rc)"])
            waiters.values.forEach { $0.resume(throwing: MQTTError.refused(code: rc, reason: reason)) }
            return
        }
        if count > 1 { logger?.info("reconnected to broker", ["broker": "\(options.host):\(options.port)"]) }
        // Re-subscribe on every connect; the broker may have lost the session.
        // (Acknowledged on this same thread, later: the ids are noted in time.)
        var pending: Set<Int32> = []
        for qos in [QoS.atMostOnce, .atLeastOnce] {
            let filters = subscriptions.filter { $0.qos == qos }.map(\.filter)
            var mid: Int32 = 0
            if !filters.isEmpty, subscribeMultiple(filters, qos: qos, mid: &mid) == MOSQ_ERR_SUCCESS.rawValue { pending.insert(mid) }
        }
        state.withLock { $0.resubscribing = pending }
        hook?(count > 1)
        waiters.values.forEach { $0.resume() }
    }

    /// After the read that took a CONNACK (libmosquitto queues its resends
    /// right after calling back): the messages that waited go to the library, in order.
    func releaseAfterConnect() {
        state.withLock { s in
            guard s.connected, !s.resendsQueued else { return }
            s.resendsQueued = true
            releaseBacklog(in: &s)
        }
    }

    /// Hands waiting messages to the library while there is room, oldest first.
    func releaseBacklog(in s: inout State) {
        while s.resendsQueued, s.acks.count < Self.maxOutstanding, let (message, next) = s.backlog.first {
            let rc = send(message, registering: next, in: &s)
            s.backlog.removeFirst()
            if rc != MOSQ_ERR_SUCCESS.rawValue {
                next(.failure(.library(operation: "publish to \(message.topic)", code: rc, message: Self.describe(rc))))
            }
        }
    }

    func handleDisconnect(rc: Int32) {
        let (wasConnected, closing, pending, onTakenOver) = state.withLock { s in
            defer { s.connected = false; s.resendsQueued = false }
            return (s.connected, s.closing, s.inFlight, s.onTakenOver)
        }
        // Another connection took the session (MQTT 5 reason 0x8E): it is
        // the owner now. Reconnecting would take it back, so the loop ends.
        if rc == Self.sessionTakenOver, !closing {
            loop.endWithoutReconnecting()
            logger?.warning("another connection took over this session; not reconnecting", ["client": options.clientID])
            onTakenOver?()
        }
        if wasConnected, !closing {
            logger?.warning("connection to broker lost; reconnecting",
                            ["reason": Self.describe(rc), "code": "\(rc)", "unacknowledged": "\(pending)"])
        }
        // Subscribes and requests in flight are lost with the connection;
        // publishes are not (see the type's doc), so their closures keep waiting.
        failAllWaiters(.connectionLost(operation: "in-flight operation"), includingAcknowledgements: false)
    }

    func handlePublished(mid: Int32, reasonCode: Int32) {
        let (sent, onRefused, drained) = state.withLock { s in
            let sent = s.acks.removeValue(forKey: mid)
            // Room again: hand the next waiting messages to the library, in order.
            releaseBacklog(in: &s)
            var drained = s.takeRoomWaiters()
            if s.acks.isEmpty && s.backlog.isEmpty { drained += s.drainWaiters; s.drainWaiters = [] }
            return (sent, s.onRefused, drained)
        }
        if reasonCode >= 0x80 {
            // Final: the library forgot it with this PUBACK, so it is never resent.
            if let sent { onRefused?(sent.topic, reasonCode) }
            sent?.ack(.failure(.publishRefused(topic: sent?.topic ?? "?", code: reasonCode)))
        } else {
            sent?.ack(.success(()))
        }
        drained.forEach { $0.resume() }
    }

    func handleSubscribed(mid: Int32, granted: [Int32]) {
        guard let waiter = state.withLock({ s in
            s.resubscribing.remove(mid)
            return s.subscribeWaiters.removeValue(forKey: mid)
        }) else { return }
        if let index = granted.firstIndex(where: { $0 >= 0x80 }) {
            let filter = index < waiter.filters.count ? waiter.filters[index] : "?"
            waiter.continuation.resume(throwing: MQTTError.subscriptionRejected(filter: filter, code: granted[index]))
        } else {
            waiter.continuation.resume()
        }
    }

    func handleMessage(_ message: MQTTMessage) {
        let (request, handler) = state.withLock { s in
            (message.correlationData.flatMap { s.requests.removeValue(forKey: $0) }, s.handler)
        }
        if let request { request.resume(returning: message); return }
        handler?(message)
    }

    func failAllWaiters(_ error: MQTTError, includingAcknowledgements: Bool) {
        let (acks, subs, requests, drains) = state.withLock { s in
            var acks: [Acknowledgement] = []
            var drains: [CheckedContinuation<Void, Never>] = []
            if includingAcknowledgements {
                acks = s.acks.values.map(\.ack) + s.backlog.drain()
                s.acks = [:]
                drains = s.drainWaiters + s.takeRoomWaiters(all: true)
                s.drainWaiters = []
            }
            defer { s.subscribeWaiters = [:]; s.requests = [:] }
            return (acks, s.subscribeWaiters, s.requests, drains)
        }
        acks.forEach { $0(.failure(error)) }
        subs.values.forEach { $0.continuation.resume(throwing: error) }
        requests.values.forEach { $0.resume(throwing: error) }
        drains.forEach { $0.resume() }
    }
}

// C callbacks: plain functions, not isolated to any actor, since
// libmosquitto calls them from its own thread.

func onConnectCallback(_: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ rc: Int32, _: Int32, _: OpaquePointer?) {
    MQTTClient.from(userdata)?.handleConnect(rc: rc)
}

func onDisconnectCallback(_: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ rc: Int32, _: OpaquePointer?) {
    MQTTClient.from(userdata)?.handleDisconnect(rc: rc)
}

func onPublishCallback(_: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ mid: Int32, _ reason: Int32, _: OpaquePointer?) {
    MQTTClient.from(userdata)?.handlePublished(mid: mid, reasonCode: reason)
}

func onSubscribeCallback(_: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ mid: Int32, _ count: Int32,
                                 _ granted: UnsafePointer<Int32>?, _: OpaquePointer?) {
    let codes = granted.map { Array(UnsafeBufferPointer(start: $0, count: Int(count))) } ?? []
    MQTTClient.from(userdata)?.handleSubscribed(mid: mid, granted: codes)
}

func onMessageCallback(_: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?,
                               _ raw: UnsafePointer<mosquitto_message>?, _ props: OpaquePointer?) {
    guard let raw, let client = MQTTClient.from(userdata) else { return }
    let m = raw.pointee
    let payload: [UInt8] = m.payloadlen > 0 && m.payload != nil
        ? Array(UnsafeRawBufferPointer(start: m.payload, count: Int(m.payloadlen)))
        : []
    var responseTopic: String?
    var correlation: [UInt8]?
    if let props {
        var topicPointer: UnsafeMutablePointer<CChar>?
        if mosquitto_property_read_string(props, Int32(MQTT_PROP_RESPONSE_TOPIC.rawValue), &topicPointer, false) != nil,
           let topicPointer {
            responseTopic = String(cString: topicPointer)
            free(topicPointer)
        }
        var value: UnsafeMutableRawPointer?
        var length: UInt16 = 0
        if mosquitto_property_read_binary(props, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), &value, &length, false) != nil,
           let value {
            correlation = Array(UnsafeRawBufferPointer(start: value, count: Int(length)))
            free(value)
        }
    }
    let message = MQTTMessage(topic: String(cString: m.topic), payload: payload,
                              qos: QoS(rawValue: m.qos) ?? .atLeastOnce, retain: m.retain,
                              responseTopic: responseTopic, correlationData: correlation)
    client.handleMessage(message)
}

/// Quality of service, typed: the services use 0 for conflated state and 1
/// for everything that must arrive.
public enum QoS: Int32, Sendable {
    case atMostOnce = 0
    case atLeastOnce = 1
}

/// One MQTT application message, with the v5 request/response properties.
public struct MQTTMessage: Sendable, Equatable {
    public var topic: String
    public var payload: [UInt8]
    public var qos: QoS
    public var retain: Bool
    public var responseTopic: String?
    public var correlationData: [UInt8]?

    public init(topic: String, payload: [UInt8], qos: QoS = .atLeastOnce, retain: Bool = false,
                responseTopic: String? = nil, correlationData: [UInt8]? = nil) {
        self.topic = topic; self.payload = payload; self.qos = qos; self.retain = retain
        self.responseTopic = responseTopic; self.correlationData = correlationData
    }

    public init(topic: String, string: String, qos: QoS = .atLeastOnce, retain: Bool = false) {
        self.init(topic: topic, payload: Array(string.utf8), qos: qos, retain: retain)
    }

    public var string: String { String(decoding: payload, as: UTF8.self) }
}

/// Every way the bus can fail, each saying what failed.
public enum MQTTError: Error, CustomStringConvertible, Sendable, Equatable {
    /// A libmosquitto call returned an error code.
    case library(operation: String, code: Int32, message: String)
    /// The broker refused the connection (v5 reason code).
    case refused(code: Int32, reason: String)
    case notConnected(operation: String)
    case timedOut(operation: String)
    /// The connection dropped while the operation waited.
    case connectionLost(operation: String)
    case subscriptionRejected(filter: String, code: Int32)
    case invalidTopic(String)
    /// The broker refused a QoS 1 message for good (PUBACK reason code ≥ 0x80,
    /// such as 0x87 not authorized): it is not sent again.
    case publishRefused(topic: String, code: Int32)

    public var description: String {
        switch self {
        case .library(let op, let code, let message): "MQTT \(op) failed: \(message) (\(code))"
        case .refused(let code, let reason): "broker refused the connection: \(reason) (\(code))"
        case .notConnected(let op): "MQTT \(op): not connected"
        case .timedOut(let op): "MQTT \(op) timed out"
        case .connectionLost(let op): "MQTT \(op): connection lost before completion"
        case .subscriptionRejected(let filter, let code): "broker rejected subscription \(filter) (\(code))"
        case .invalidTopic(let topic): "invalid topic '\(topic)'"
        case .publishRefused(let topic, let code): "broker refused the message on \(topic) (\(code))"
        }
    }
}

import TrackerLog

/// How to reach the broker and what session to keep there.
public struct MQTTOptions: Sendable {
    public enum ProtocolVersion: Int32, Sendable { case v311 = 4, v5 = 5 }

    public var host: String
    public var port: Int32
    public var clientID: String
    /// false keeps a persistent session: the broker queues QoS 1 messages
    /// for subscriptions while the client is away.
    public var cleanStart: Bool
    /// How long the broker keeps the session after a disconnect (v5).
    public var sessionExpirySec: UInt32
    public var keepAliveSec: Int32
    public var username: String?
    public var password: String?
    public var will: MQTTMessage?
    public var protocolVersion: ProtocolVersion
    /// Unacknowledged QoS 1 messages the broker may send us (v5 receive
    /// maximum). A service acknowledges a batch only after its commit, so
    /// this bounds a batch.
    public var receiveWindow: Int32 = 1_000
    /// Unacknowledged QoS 1 messages we send (v5 send maximum). libmosquitto
    /// walks every message in flight on each PUBACK, so the walk grows with
    /// the window: at 1,000 it took about a tenth of the filter's CPU
    /// (docs/benchmarks/2026-12-06-send-window.md). A Receive Maximum in the
    /// broker's CONNACK replaces it (mosquitto advertises its
    /// `max_inflight_messages`; the product's configs set 0, no limit).
    public var sendWindow: Int32 = 256
    /// Where the client logs connection loss, reconnects and refusals (nil: quiet).
    public var logger: Logger?

    public init(host: String = "127.0.0.1", port: Int32 = 1883, clientID: String, cleanStart: Bool = true,
                sessionExpirySec: UInt32 = 0, keepAliveSec: Int32 = 30, username: String? = nil,
                password: String? = nil, will: MQTTMessage? = nil, protocolVersion: ProtocolVersion = .v5,
                logger: Logger? = nil) {
        self.host = host; self.port = port; self.clientID = clientID; self.cleanStart = cleanStart
        self.sessionExpirySec = sessionExpirySec; self.keepAliveSec = keepAliveSec
        self.username = username; self.password = password; self.will = will
        self.protocolVersion = protocolVersion
        self.logger = logger
    }
}

import Bus
import Model
import Synchronization

/// Follows the broker's acknowledgements of a service's outgoing internal
/// messages, per device, so the service can persist "acknowledged through
/// seq N" and, after a crash, republish only what may have been lost.
/// Consumers skip anything at or below the last seq they applied, so a
/// republished message is harmless.
public final class AckTracker: Sendable {
    private let state = Mutex<[DeviceID: Progress]>([:])

    struct Progress {
        var ackedThrough: Int64
        var highestSent: Int64
        var pending: Set<Int64> = []
    }

    public init() {}

    /// Starts a device's count where the store says it stands.
    public func restore(_ device: DeviceID, ackedThrough: Int64) {
        state.withLock { $0[device] = Progress(ackedThrough: ackedThrough, highestSent: ackedThrough) }
    }

    public func sent(_ device: DeviceID, _ seq: Int64) {
        state.withLock { all in
            var p = all[device] ?? Progress(ackedThrough: seq - 1, highestSent: seq - 1)
            p.pending.insert(seq)
            p.highestSent = max(p.highestSent, seq)
            all[device] = p
        }
    }

    public func acknowledged(_ device: DeviceID, _ seq: Int64) {
        state.withLock { all in
            guard var p = all[device] else { return }
            p.pending.remove(seq)
            // Advance over every seq that is no longer pending.
            while p.ackedThrough < p.highestSent, !p.pending.contains(p.ackedThrough + 1) { p.ackedThrough += 1 }
            all[device] = p
        }
    }

    /// Every seq at or below this has been acknowledged (or was never sent).
    public func ackedThrough(_ device: DeviceID) -> Int64? { state.withLock { $0[device]?.ackedThrough } }

    public var pendingCount: Int { state.withLock { $0.values.reduce(0) { $0 + $1.pending.count } } }

    public func all() -> [DeviceID: Int64] { state.withLock { $0.mapValues(\.ackedThrough) } }
}

/// Publishes a service's stored internal messages (QoS 1) and follows their
/// acknowledgements; the stored row stays the source until acknowledged.
public struct Outbox: Sendable {
    public let acks = AckTracker()
    let client: MQTTClient
    let logger: Logger

    public init(client: MQTTClient, logger: Logger) { self.client = client; self.logger = logger }

    public func publish(_ device: DeviceID, seq: Int64, topic: String, body: [UInt8]) {
        acks.sent(device, seq)
        let acks = self.acks
        do {
            try client.publish(MQTTMessage(topic: topic, payload: body)) { result in
                if case .success = result { acks.acknowledged(device, seq) }
            }
        } catch {
            // Stays unacknowledged in the store; republished on the next start.
            logger.warning("internal message not published yet", ["device": device.rawValue, "seq": "\(seq)", "error": "\(error)"])
        }
    }
}

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
        /// The watermark last written to the store.
        var saved: Int64

        mutating func advance() {
            while ackedThrough < highestSent, !pending.contains(ackedThrough + 1) { ackedThrough += 1 }
        }
    }

    public init() {}

    /// Starts a device's count where the store says it stands.
    public func restore(_ device: DeviceID, ackedThrough: Int64) {
        state.withLock { $0[device] = Progress(ackedThrough: ackedThrough, highestSent: ackedThrough, saved: ackedThrough) }
    }

    public func sent(_ device: DeviceID, _ seq: Int64) {
        state.withLock { all in
            // Mutate in place: copying Progress out would copy its Set on every call.
            if all[device] == nil { all[device] = Progress(ackedThrough: seq - 1, highestSent: seq - 1, saved: 0) }
            all[device]!.pending.insert(seq)
            all[device]!.highestSent = max(all[device]!.highestSent, seq)
        }
    }

    public func acknowledged(_ device: DeviceID, _ seq: Int64) {
        state.withLock { all in
            guard all[device] != nil else { return }
            all[device]!.pending.remove(seq)
            // Advance over every seq that is no longer pending.
            all[device]!.advance()
        }
    }

    /// Every seq at or below this has been acknowledged (or was never sent).
    public func ackedThrough(_ device: DeviceID) -> Int64? { state.withLock { $0[device]?.ackedThrough } }

    public var pendingCount: Int { state.withLock { $0.values.reduce(0) { $0 + $1.pending.count } } }

    /// Watermarks that moved since they were last saved; marks them saved.
    func takeUnsaved() -> [(DeviceID, Int64)] {
        state.withLock { all in
            var moved: [(DeviceID, Int64)] = []
            for (device, p) in all where p.ackedThrough > p.saved {
                moved.append((device, p.ackedThrough))
                all[device]?.saved = p.ackedThrough
            }
            return moved
        }
    }

    /// Undoes `takeUnsaved` when the write failed, so the next save retries.
    func unsave(_ watermarks: [(DeviceID, Int64)]) {
        state.withLock { all in for (device, _) in watermarks { all[device]?.saved = 0 } }
    }
}


/// What an outbox needs from a service's store: the stored messages are the
/// outbox, and the store keeps each device's "acknowledged through" watermark.
public protocol OutboxStore {
    func ackWatermarks() throws -> [(DeviceID, Int64)]
    func saveAckedThrough(_ device: DeviceID, _ seq: Int64) throws
    /// Stored messages above `seq`, oldest first.
    func unacknowledged(_ device: DeviceID, after seq: Int64) throws -> [(seq: Int64, body: String)]
}

/// Publishes a service's stored internal messages at QoS 1 and follows the
/// broker's acknowledgements: on start it republishes whatever the last run
/// may not have delivered, and it saves the watermark as it advances.
public final class Outbox: Sendable {
    private let acks = AckTracker()
    private let client: MQTTClient
    private let logger: Logger
    private let topic: @Sendable (DeviceID) -> String
    private let republished = Mutex(false)

    public init(client: MQTTClient, logger: Logger, topic: @escaping @Sendable (DeviceID) -> String) {
        self.client = client
        self.logger = logger
        self.topic = topic
    }

    /// Loads the saved watermarks (once, at start).
    public func restore(from store: some OutboxStore) throws {
        for (device, acked) in try store.ackWatermarks() { acks.restore(device, ackedThrough: acked) }
    }

    public func publish(_ device: DeviceID, seq: Int64, body: [UInt8]) {
        acks.sent(device, seq)
        let acks = self.acks
        do {
            try client.publish(MQTTMessage(topic: topic(device), payload: body)) { result in
                if case .success = result { acks.acknowledged(device, seq) }
            }
        } catch {
            // Stays unacknowledged in the store; republished on the next start.
            logger.warning("internal message not published yet", ["device": device.rawValue, "seq": "\(seq)", "error": "\(error)"])
        }
    }

    /// On the first connect only: publish every stored message above its
    /// device's watermark (a reconnect is covered by the MQTT session itself).
    public func republishOnce(from store: some OutboxStore) {
        guard republished.withLock({ done in defer { done = true }; return !done }) else { return }
        do {
            var count = 0
            for (device, acked) in try store.ackWatermarks() {
                for (seq, body) in try store.unacknowledged(device, after: acked) {
                    publish(device, seq: seq, body: Array(body.utf8))
                    count += 1
                }
            }
            if count > 0 { logger.info("republished unacknowledged messages", ["count": "\(count)"]) }
        } catch {
            logger.error("cannot read the outbox", ["error": "\(error)"])
        }
    }

    /// Writes the watermarks that advanced since the last save.
    public func saveWatermarks(to store: some OutboxStore) throws {
        let moved = acks.takeUnsaved()
        do {
            for (device, seq) in moved { try store.saveAckedThrough(device, seq) }
        } catch {
            acks.unsave(moved)
            throw error
        }
    }

    /// Every seq at or below this was acknowledged by the broker: safe to trim.
    public func ackedThrough(_ device: DeviceID) -> Int64 { acks.ackedThrough(device) ?? 0 }

    public var pendingCount: Int { acks.pendingCount }
}

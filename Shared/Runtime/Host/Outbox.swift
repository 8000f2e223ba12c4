import Bus
import Model
import Synchronization

/// Where the host publishes: the MQTT client, or a test's fake.
public protocol MessageBus: Sendable {
    /// Queues a message; `acknowledged` runs when the broker has it (QoS 1).
    func publish(_ message: MQTTMessage, acknowledged: MQTTClient.Acknowledgement?) throws
}

extension MQTTClient: MessageBus {}

/// Publishes a service's stored internal messages at QoS 1 and follows the
/// broker's acknowledgements per device, so the host can save "acknowledged
/// through seq N", trim the log below it, and after a crash republish only
/// what may not have arrived. Consumers skip any seq they applied already,
/// so a message sent twice is harmless.
///
/// The bus keeps every unacknowledged message across reconnects, so an
/// acknowledgement always comes; the watermark never freezes.
public final class Outbox: Sendable {
    private let topic: @Sendable (DeviceID) -> String
    private let clock: any WallClock
    private let state = Mutex<[DeviceID: Progress]>([:])

    struct Progress {
        var ackedThrough: Int64
        var highestSent: Int64
        var pending: Set<Int64> = []
        /// The watermark last written to the store.
        var saved: Int64
        /// When (wall clock) this run last sent one of the device's messages.
        var lastSentMs: Int64?

        mutating func advance() {
            while ackedThrough < highestSent, !pending.contains(ackedThrough + 1) { ackedThrough += 1 }
        }
    }

    init(topic: @escaping @Sendable (DeviceID) -> String, clock: any WallClock = SystemWallClock()) {
        self.topic = topic
        self.clock = clock
    }

    /// Starts a device's count where the store says it stands.
    func restore(_ device: DeviceID, ackedThrough: Int64) {
        state.withLock { $0[device] = Progress(ackedThrough: ackedThrough, highestSent: ackedThrough, saved: ackedThrough) }
    }

    /// Publishes one stored message and follows its acknowledgement.
    func send(_ device: DeviceID, seq: Int64, body: [UInt8], on bus: any MessageBus) throws {
        state.withLock { all in
            // Mutate in place: copying Progress out would copy its Set.
            if all[device] == nil { all[device] = Progress(ackedThrough: seq - 1, highestSent: seq - 1, saved: 0) }
            all[device]!.pending.insert(seq)
            all[device]!.highestSent = max(all[device]!.highestSent, seq)
            all[device]!.lastSentMs = clock.nowMs()
        }
        try bus.publish(MQTTMessage(topic: topic(device), payload: body)) { [weak self] result in
            switch result {
            case .success: self?.acknowledged(device, seq)
            // Refused for good (health counts it as denied): waiting for it would hold
            // the watermark forever; a consumer that misses it asks the log for it.
            case .failure(.publishRefused): self?.acknowledged(device, seq)
            // The client was closed for good: it stays above the watermark and is republished at the next start.
            case .failure: break
            }
        }
    }

    func acknowledged(_ device: DeviceID, _ seq: Int64) {
        state.withLock { all in
            guard all[device] != nil else { return }
            all[device]!.pending.remove(seq)
            all[device]!.advance()
        }
    }

    func highestSent(_ device: DeviceID) -> Int64? { state.withLock { $0[device]?.highestSent } }

    /// Every seq at or below this has been acknowledged (or was never sent).
    func ackedThrough(_ device: DeviceID) -> Int64? { state.withLock { $0[device]?.ackedThrough } }

    /// The newest seq sent to each device that fell quiet lately (sent
    /// between `quietMs` and `recentMs` ago), at most `limit`, newest first:
    /// health carries them, so a consumer that lost a stream's tail finds out.
    func tips(quietMs: Int64 = 1_000, recentMs: Int64 = 300_000, limit: Int = 1_000) -> [String: Int64] {
        let now = clock.nowMs()
        let quiet = state.withLock { all in
            all.compactMap { device, p -> (String, Int64, Int64)? in
                guard let sent = p.lastSentMs, now - sent >= quietMs, now - sent <= recentMs else { return nil }
                return (device.rawValue, p.highestSent, sent)
            }
        }
        return Dictionary(uniqueKeysWithValues: quiet.sorted { $0.2 > $1.2 }.prefix(limit).map { ($0.0, $0.1) })
    }

    /// Messages published and not yet acknowledged by the broker.
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

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
    /// Devices with messages unacknowledged or a watermark not yet saved:
    /// a settled device is forgotten (`forgetSettled`), so this holds what is
    /// in flight, not the fleet.
    private let state = Mutex<[DeviceID: Progress]>([:])
    /// The newest sends, for `tips`.
    private let recent = Mutex(RecentSends(capacity: 20_000))

    struct Progress {
        var ackedThrough: Int64
        var highestSent: Int64
        var pending: Set<Int64> = []
        /// The watermark last written to the store.
        var saved: Int64

        mutating func advance() {
            while ackedThrough < highestSent, !pending.contains(ackedThrough + 1) { ackedThrough += 1 }
        }

        var isSettled: Bool { pending.isEmpty && ackedThrough == highestSent && saved == ackedThrough }
    }

    /// The last `capacity` sends, oldest overwritten first.
    struct RecentSends {
        let capacity: Int
        var sends: [(device: DeviceID, seq: Int64, sentMs: Int64)] = []
        var next = 0

        init(capacity: Int) { self.capacity = capacity }

        mutating func note(_ device: DeviceID, _ seq: Int64, _ sentMs: Int64) {
            if sends.count < capacity { sends.append((device, seq, sentMs)) } else { sends[next] = (device, seq, sentMs) }
            next = (next + 1) % capacity
        }

        /// The sends newest first, until `body` says stop.
        func newestFirst(_ body: ((device: DeviceID, seq: Int64, sentMs: Int64)) -> Bool) {
            for k in 0..<sends.count where !body(sends[(next - 1 - k + 2 * sends.count) % sends.count]) { return }
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
            // A device not here has everything below this acknowledged and saved.
            if all[device] == nil { all[device] = Progress(ackedThrough: seq - 1, highestSent: seq - 1, saved: seq - 1) }
            all[device]!.pending.insert(seq)
            all[device]!.highestSent = max(all[device]!.highestSent, seq)
        }
        let now = clock.nowMs()
        recent.withLock { $0.note(device, seq, now) }
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
    /// Read from the last 20,000 sends: with a fleet faster than that in a
    /// second, the devices quiet longest drop out first, as past `limit`.
    func tips(quietMs: Int64 = 1_000, recentMs: Int64 = 300_000, limit: Int = 1_000) -> [String: Int64] {
        let now = clock.nowMs()
        return recent.withLock { recent in
            var seen: Set<DeviceID> = [], tips: [String: Int64] = [:]
            recent.newestFirst { send in
                if now - send.sentMs > recentMs || tips.count == limit { return false }
                // A device's newest send comes first: only that one counts.
                if seen.insert(send.device).inserted, now - send.sentMs >= quietMs { tips[send.device.rawValue] = send.seq }
                return true
            }
            return tips
        }
    }

    /// Devices followed now (tests, health).
    var followedDevices: Int { state.withLock { $0.count } }

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

    /// Forgets the devices with nothing in flight and their watermark saved
    /// (after the batch that saved it committed): memory follows what is in
    /// flight, not how many devices ever sent.
    func forgetSettled() {
        state.withLock { all in
            guard all.count > 64 else { return }
            all = all.filter { !$0.value.isSettled }
        }
    }
}

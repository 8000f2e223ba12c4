import Bus
import Model
import Synchronization

/// Where the host publishes: the MQTT client, or a test's fake.
public protocol MessageBus: Sendable {
    /// Queues a message; `acknowledged` runs when the broker has it (QoS 1).
    func publish(_ message: MQTTMessage, acknowledged: MQTTClient.Acknowledgement?) throws
    /// Queues several, in order; returns the error of each that was refused.
    func publish(all messages: [(MQTTMessage, MQTTClient.Acknowledgement?)]) -> [(MQTTMessage, any Error)]
}

extension MessageBus {
    public func publish(all messages: [(MQTTMessage, MQTTClient.Acknowledgement?)]) -> [(MQTTMessage, any Error)] {
        messages.compactMap { message, ack in
            do { try publish(message, acknowledged: ack); return nil } catch { return (message, error) }
        }
    }
}

extension MQTTClient: MessageBus {}

/// Collects what a batch publishes, to hand the bus all of it at once.
final class PublishQueue: MessageBus, @unchecked Sendable {
    private(set) var messages: [(MQTTMessage, MQTTClient.Acknowledgement?)] = []

    func publish(_ message: MQTTMessage, acknowledged: MQTTClient.Acknowledgement?) throws {
        messages.append((message, acknowledged))
    }

    /// Hands everything to `bus` in order, and empties.
    func flush(to bus: any MessageBus) -> [(MQTTMessage, any Error)] {
        guard !messages.isEmpty else { return [] }
        defer { messages.removeAll(keepingCapacity: true) }
        return bus.publish(all: messages)
    }
}

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
    private let state = Mutex(Followed())
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

    /// The progress of the devices followed, and which of them a commit must
    /// look at: with thousands in flight, scanning them all at every commit
    /// was a twelfth of the gateway's time.
    struct Followed {
        var progress: [DeviceID: Progress] = [:]
        /// Watermarks that moved past what was saved, and since when (ms).
        var unsaved: [DeviceID: Int64] = [:]
        /// Saved (or restored) since the last `forgetSettled`: the devices that may have settled.
        var settling: Set<DeviceID> = []

        /// The device's watermark if it moved past what was saved, now marked saved.
        mutating func markSaved(_ device: DeviceID) -> Int64? {
            unsaved[device] = nil
            guard let p = progress[device], p.ackedThrough > p.saved else { return nil }
            progress[device]!.saved = p.ackedThrough
            settling.insert(device)
            return p.ackedThrough
        }
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
        state.withLock {
            $0.progress[device] = Progress(ackedThrough: ackedThrough, highestSent: ackedThrough, saved: ackedThrough)
            $0.settling.insert(device)
        }
    }

    /// Publishes one stored message and follows its acknowledgement.
    func send(_ device: DeviceID, seq: Int64, body: [UInt8], on bus: any MessageBus) throws {
        state.withLock { followed in
            // Mutate in place: copying Progress out would copy its Set.
            // A device not here has everything below this acknowledged and saved.
            if followed.progress[device] == nil {
                followed.progress[device] = Progress(ackedThrough: seq - 1, highestSent: seq - 1, saved: seq - 1)
            }
            followed.progress[device]!.pending.insert(seq)
            followed.progress[device]!.highestSent = max(followed.progress[device]!.highestSent, seq)
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
        state.withLock { followed in
            guard followed.progress[device] != nil else { return }
            followed.progress[device]!.pending.remove(seq)
            // An emptied set keeps its storage: with a large fleet, quiet
            // devices wait long for their watermark's save, each holding one.
            if followed.progress[device]!.pending.isEmpty { followed.progress[device]!.pending = [] }
            followed.progress[device]!.advance()
            if followed.progress[device]!.ackedThrough > followed.progress[device]!.saved, followed.unsaved[device] == nil {
                followed.unsaved[device] = clock.nowMs()
            }
        }
    }

    func highestSent(_ device: DeviceID) -> Int64? { state.withLock { $0.progress[device]?.highestSent } }

    /// Every seq at or below this has been acknowledged (or was never sent).
    func ackedThrough(_ device: DeviceID) -> Int64? { state.withLock { $0.progress[device]?.ackedThrough } }

    /// Tips one health carries at most.
    static let tipLimit = 1_000

    /// The newest seq sent to each device that fell quiet lately (sent
    /// between `quietMs` and `recentMs` ago), at most `limit`, newest first:
    /// health carries them, so a consumer that lost a stream's tail finds out.
    /// Read from the last 20,000 sends: with a fleet faster than that in a
    /// second, the devices quiet longest drop out first, as past `limit`.
    func tips(quietMs: Int64 = 1_000, recentMs: Int64 = 300_000, limit: Int = Outbox.tipLimit) -> [String: Int64] {
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
    var followedDevices: Int { state.withLock { $0.progress.count } }
    /// Room the device's set of messages in flight holds (tests).
    func inFlightCapacityForTests(_ device: DeviceID) -> Int? { state.withLock { $0.progress[device]?.pending.capacity } }

    /// Messages published and not yet acknowledged by the broker.
    public var pendingCount: Int { state.withLock { $0.progress.values.reduce(0) { $0 + $1.pending.count } } }

    /// Watermarks that moved since they were last saved, and have waited
    /// unsaved since `movedByMs` or before (all of them by default), at most
    /// `limit`; marks them saved. A device that keeps sending has its
    /// watermark carried by its row's write instead (`carry`), so the
    /// periodic save finds only the devices that fell quiet, not every device
    /// that spoke since the last one; a fleet falling quiet at once is saved
    /// `limit` at a time, the rest at the next save.
    func takeUnsaved(movedByMs cutoff: Int64 = .max, limit: Int = .max) -> [(DeviceID, Int64)] {
        state.withLock { followed in
            // The due ones first: removing entries while iterating the dictionary would copy it whole.
            let due = Array(followed.unsaved.lazy.filter { $0.value <= cutoff }.prefix(limit).map(\.key))
            return due.compactMap { device in followed.markSaved(device).map { (device, $0) } }
        }
    }

    /// The device's watermark when it moved past what was saved, marked
    /// saved: the commit writes it in the device's row, on the page that
    /// commit writes anyway. `unsave` it if that commit fails.
    func carry(_ device: DeviceID) -> Int64? {
        state.withLock { $0.markSaved(device) }
    }

    /// Undoes `takeUnsaved` or `carry` when the write failed, so the next save retries.
    func unsave(_ watermarks: [(DeviceID, Int64)]) {
        let now = clock.nowMs()
        state.withLock { followed in
            for (device, _) in watermarks where followed.progress[device] != nil {
                followed.progress[device]!.saved = 0
                if followed.unsaved[device] == nil { followed.unsaved[device] = now }
            }
        }
    }

    /// Forgets the devices with nothing in flight and their watermark saved
    /// (after the batch that saved it committed): memory follows what is in
    /// flight, not how many devices ever sent.
    func forgetSettled() {
        state.withLock { followed in
            guard followed.progress.count > 64 else { return }
            for device in followed.settling where followed.progress[device]?.isSettled == true {
                followed.progress[device] = nil
            }
            followed.settling.removeAll(keepingCapacity: true)
        }
    }
}

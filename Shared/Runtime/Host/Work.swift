import Bus
import FoundationEssentials
import Model

/// The last seq applied from one producer's input, and that producer's epoch.
struct InputMark: Codable, Equatable {
    var epoch: String?
    var seq: Int64
}

/// A device's state as the host keeps it: the service's row, the seq
/// watermark of each sequenced input, the outbox watermark.
struct DeviceEntry<Row> {
    var row: Row
    var inputs: [String: InputMark]
    var ackedThrough: Int64
    /// The newest seq in the outbox log, once read (the next message's `prev`).
    var lastSent: Int64? = nil
}

/// How `admit` takes a sequenced message whose `prev` was never applied.
enum GapHandling: Equatable {
    /// Throw `GapFound`: the host holds it and asks the producer for the rest.
    case repair
    /// A repair of this input is under way: throw `HeldBack` for anything new.
    case hold
    /// The repair of seqs up to `through` is over: apply it, a gap within
    /// that range reported with this reason (one beyond it is repaired).
    case accept(StreamGap.Reason, through: Int64)
}

/// Messages `after < seq ≤ through` never came before `seq`.
struct GapFound: Error {
    let epoch: String
    let after: Int64
    let through: Int64
    let seq: Int64
}

/// A new message held back behind a repair under way.
struct HeldBack: Error { let seq: Int64 }

/// A message a service publishes on its internal stream through `Work.send`.
public protocol OutboxMessage: Sequenced, Encodable, JSONWritable {
    var prev: Int64? { get set }
}

extension RawFix: OutboxMessage {}
extension PointMessage: OutboxMessage {}
extension MotionMessage: OutboxMessage {}

/// Something the host does once the batch that produced it is committed.
enum Effect {
    case publish(MQTTMessage)
    /// Made and published only if no later `.conflated` of the same topic follows in the batch.
    case conflated(topic: String, make: () -> MQTTMessage)
    case outbox(DeviceID, seq: Int64, body: [UInt8])
    /// Boxed: inline, a command and its reply set every item's size, and the
    /// buffer a service keeps between batches held 3.3 MB in the filter at
    /// 10,000 devices (1.1 MB boxed).
    indirect case reply(IncomingCommand, CommandReply)
    case count(String, Int64)
    /// Something the service does once what the unit stored is visible to others (a worker's wake-up).
    case afterCommit(@Sendable () -> Void)
}

/// What a batch asked for, in order, until its commit: one buffer the
/// units of work append to (a failed unit is cut off again), and the
/// health figures summed rather than listed.
final class BatchEffects {
    var items: [Effect] = []
    var processed: Int64 = 0
    var errors: Int64 = 0
    var lagMs: Int64?
    var fixAgeMs: Int64?

    struct Mark {
        let count: Int
        let processed: Int64
        let errors: Int64
        let lagMs: Int64?
        let fixAgeMs: Int64?
    }

    var mark: Mark { Mark(count: items.count, processed: processed, errors: errors, lagMs: lagMs, fixAgeMs: fixAgeMs) }

    /// Forgets what was asked for since `mark` (a unit of work that failed).
    func rewind(to mark: Mark) {
        items.removeSubrange(mark.count...)
        processed = mark.processed
        errors = mark.errors
        lagMs = mark.lagMs
        fixAgeMs = mark.fixAgeMs
    }

    /// The messages to publish among the items from `index` on.
    func messages(from index: Int) -> Int {
        items[index...].reduce(0) { count, item in
            switch item {
            case .publish, .conflated, .outbox, .reply: count + 1
            case .count, .afterCommit: count
            }
        }
    }

    func reset() {
        items.removeAll(keepingCapacity: true)
        processed = 0
        errors = 0
        lagMs = nil
        fixAgeMs = nil
    }
}

/// One message's (or command's, or sweep's) work on one device: the
/// service changes `row`, appends to its logs, and asks for events and
/// messages; the host stores the row and the logs in the message's
/// savepoint and publishes only after the batch commits.
public final class Work<Row> {
    public let device: DeviceID
    /// Wall-clock time when the host took the message.
    public let nowMs: Int64
    /// This service's store identity, to stamp on the internal messages it sends.
    public let epoch: String
    public var row: Row
    /// The watermark of the sequenced input this unit applies (nil for others).
    var input: (name: String, mark: InputMark?)?
    /// How a sequenced message that skips seqs is taken (see `admit`).
    var gapHandling = GapHandling.repair
    /// The newest seq in the outbox log (nil until read).
    private var lastSent: Int64?
    /// The outbox watermark as stored when the entry was loaded.
    private let storedAckedThrough: Int64
    /// The broker's acknowledgements of this run (read only when trimming).
    private let acknowledgements: Outbox?
    private let effects: BatchEffects
    public let topics: Topics
    private let outbox: OutboxRoute?
    private let retention: [ObjectIdentifier: LogRetention]

    init(device: DeviceID, nowMs: Int64, epoch: String, entry: DeviceEntry<Row>, effects: BatchEffects, topics: Topics,
         outbox: OutboxRoute?, acknowledgements: Outbox?, retention: [ObjectIdentifier: LogRetention]) {
        self.device = device; self.nowMs = nowMs; self.epoch = epoch; self.effects = effects
        self.row = entry.row; self.storedAckedThrough = entry.ackedThrough; self.acknowledgements = acknowledgements
        self.lastSent = entry.lastSent
        self.topics = topics; self.outbox = outbox; self.retention = retention
    }

    /// Writes what this unit changed into the cached entry, in place.
    func store(into entry: inout DeviceEntry<Row>) {
        entry.row = row
        if let input { entry.inputs[input.name] = input.mark }
        entry.lastSent = lastSent
    }

    /// An event on this device's event stream.
    public func emit(_ body: Event.Body, timeMs: Int64? = nil) {
        emit(Event(device: device, timeMs: timeMs ?? nowMs, body))
    }

    public func emit(_ event: Event) {
        effects.items.append(.publish(MQTTMessage(topic: topics.events(event.device), payload: JSONCoding.bytes(event.bounded))))
    }

    /// Any other message (a request to another service).
    public func publish(_ message: MQTTMessage) { effects.items.append(.publish(message)) }

    /// A message of which only the newest per topic matters (a live frame):
    /// a burst of them in one batch publishes the last, not a backlog.
    /// `make` runs only for the one that is published.
    public func publishLatest(topic: String, _ make: @escaping () -> MQTTMessage) { effects.items.append(.conflated(topic: topic, make: make)) }

    /// Stores an internal message in the outbox log and publishes it after
    /// the commit, stamped with the seq of the device's message before it
    /// (`prev`), so a consumer that missed one knows and asks for it.
    public func send<M: OutboxMessage>(_ message: M, sessionID: String?, timeMs: Int64?) throws {
        var message = message
        message.prev = try previousSent()
        try send(seq: message.seq, sessionID: sessionID, timeMs: timeMs, body: JSONCoding.bytes(message))
    }

    /// Stores a body as it is (it carries no `prev`: a consumer cannot tell
    /// what it missed before it) and publishes it after the commit.
    public func send(seq: Int64, sessionID: String?, timeMs: Int64?, body: [UInt8]) throws {
        guard let outbox else { preconditionFailure("this service declared no outbox") }
        try append(to: outbox.log, seq: seq, sessionID: sessionID, timeMs: timeMs, body: body)
        lastSent = max(try previousSent(), seq)
        effects.items.append(.outbox(device, seq: seq, body: body))
    }

    /// The newest seq in the outbox log: read once per device while it is cached.
    private func previousSent() throws -> Int64 {
        if let lastSent { return lastSent }
        guard let outbox else { preconditionFailure("this service declared no outbox") }
        let newest = try outbox.log.newestSeq(device) ?? 0
        lastSent = newest
        return newest
    }

    /// Appends to one of the service's logs, trimming it to its retention
    /// every 256 seqs (an outbox never past what the broker acknowledged).
    public func append(to log: DeviceLog, seq: Int64, sessionID: String?, timeMs: Int64?, body: [UInt8]) throws {
        try log.append(device, seq: seq, sessionID: sessionID, timeMs: timeMs, body: body)
        guard let retention = retention[ObjectIdentifier(log)] else { return }
        retention.total += 1
        // Every 256 seqs; every 16 while the log is held to its total.
        if seq % (retention.share == nil ? 256 : 16) == 0 {
            var through = seq - Int64(retention.keep)
            if log === outbox?.log { through = min(through, max(storedAckedThrough, acknowledgements?.ackedThrough(device) ?? 0)) }
            retention.total -= try log.trim(device, through: through)
        }
    }

    public func count(_ counter: String, _ n: Int64 = 1) { effects.items.append(.count(counter, n)) }
    /// Runs `action` once the batch is committed (not at all if it is rolled back).
    public func afterCommit(_ action: @escaping @Sendable () -> Void) { effects.items.append(.afterCommit(action)) }
    /// Messages this unit handled, for health's `processed`.
    public func processed(_ n: Int64 = 1) { effects.processed += n }
    /// An input refused for what it says (health's `errors`).
    public func error() { effects.errors += 1 }
    /// Health's `lagMs` and `fixAgeMs` for a fix the gateway received at
    /// `receivedMs` (nil: not known, counted from the fix's time): the newest unit's figures win.
    public func lag(receivedMs: Int64?, fixMs: Int64) {
        effects.lagMs = nowMs - (receivedMs ?? fixMs)
        effects.fixAgeMs = nowMs - fixMs
    }

    /// How far ahead of the last applied seq a producer may jump (a billion:
    /// decades of fixes at 1 Hz; anything beyond is a forgery or a bug).
    static var maxSeqJump: Int64 { 1_000_000_000 }

    /// Whether a sequenced message is new: above the input's watermark, or
    /// from a producer that started over (a new epoch, announced once).
    /// A new message whose `prev` lies above the watermark follows messages
    /// that never came: by `gapHandling` it is held back for a repair, or
    /// (the repair is over) applied with the gap reported.
    func admit<M: Sequenced>(_ message: M) throws -> Bool {
        guard let (name, mark) = input else { preconditionFailure("admit outside a sequenced input") }
        // A seq absurdly far ahead would silence the device for good if it moved the watermark.
        guard message.seq > 0, message.seq - (mark?.seq ?? 0) <= Self.maxSeqJump else {
            throw InputRefusal(.badInput, "\(name): seq \(message.seq) is not within 1…\((mark?.seq ?? 0) + Self.maxSeqJump) "
                               + "(last applied \(mark?.seq ?? 0)); the message was not applied")
        }
        let restarted = mark?.epoch != nil && message.epoch != nil && mark?.epoch != message.epoch
        // Within the producer's epoch, the last seq applied.
        let applied = restarted ? 0 : mark?.seq ?? 0
        if !restarted, let mark, message.seq <= mark.seq { return false }
        switch gapHandling {
        case .hold: throw HeldBack(seq: message.seq)
        case .repair:
            if let prev = message.prev, prev > applied, let epoch = message.epoch ?? mark?.epoch {
                throw GapFound(epoch: epoch, after: applied, through: min(prev, message.seq - 1), seq: message.seq)
            }
        case .accept(let reason, let through):
            if let prev = message.prev, prev > applied {
                // A gap beyond the range repaired is a new one: repaired in turn.
                if prev > through, let epoch = message.epoch ?? mark?.epoch {
                    throw GapFound(epoch: epoch, after: applied, through: min(prev, message.seq - 1), seq: message.seq)
                }
                emit(.streamGap(StreamGap(stream: name, from: applied + 1, to: min(prev, message.seq - 1), reason: reason)))
                count("streamGaps")
            }
        }
        if restarted, let previous = mark?.epoch, let epoch = message.epoch {
            emit(.diagnostic(code: "producerReset", message:
                "\(name): the producer's store was replaced (epoch \(previous) → \(epoch)); its numbering restarts at seq \(message.seq)"))
        }
        input = (name, InputMark(epoch: message.epoch ?? mark?.epoch, seq: message.seq))
        return true
    }

    /// Moves the watermark past seqs that will never come, and says so.
    func skip(to seq: Int64, epoch: String, gap: StreamGap) {
        guard let (name, mark) = input else { preconditionFailure("skip outside a sequenced input") }
        if mark?.epoch == epoch, let mark, mark.seq >= seq { return }
        input = (name, InputMark(epoch: epoch, seq: seq))
        emit(.streamGap(gap))
        count("streamGaps")
    }
}

import Bus
import Model

/// How a consumer repairs the gaps in its sequenced inputs.
public struct RepairSettings: Sendable {
    /// Ask the producer again after this long without an answer.
    public var retryMs: Int64
    /// Give up after this long: the gap is reported (`streamGap`, `noAnswer`) and the held messages applied.
    public var timeoutMs: Int64
    /// A producer's tip above what arrived must stay so for this long before it counts as a gap
    /// (a tip can overtake its own messages by a moment).
    public var tipGraceMs: Int64
    /// Messages held, across devices, while their gaps are repaired; past that a
    /// newer message is not held but fetched again with the next repair.
    public var maxHeld: Int

    public init(retryMs: Int64 = 3_000, timeoutMs: Int64 = 30_000, tipGraceMs: Int64 = 2_000, maxHeld: Int = 20_000) {
        self.retryMs = retryMs; self.timeoutMs = timeoutMs; self.tipGraceMs = tipGraceMs; self.maxHeld = maxHeld
    }
}

/// The consumer's side of gap repair, as a value: which (device, input)
/// waits for which range, which newer messages wait behind it, which
/// producer tips look ahead of what arrived. The host carries out what it
/// returns (ask the producer, apply, give up); it holds nothing durable —
/// a held message was acknowledged, but the producer's log still has it.
struct StreamRepairs {
    struct Key: Hashable { let device: DeviceID; let input: String }

    /// One request to the producer: `after < seq ≤ through` in `epoch`.
    struct Ask: Equatable {
        let key: Key
        let id: String
        let request: RepairRequest
    }

    struct Pending {
        var epoch: String
        var after: Int64
        var through: Int64
        var id: String
        var firstAskedMs: Int64
        var lastAskedMs: Int64
        /// Newer messages, applied once the range is in.
        var held: [(seq: Int64, message: MQTTMessage)] = []
    }

    struct Suspect { var epoch: String; var tip: Int64; var sinceMs: Int64 }

    let settings: RepairSettings
    private(set) var pending: [Key: Pending] = [:]
    private var byID: [String: Key] = [:]
    private var suspects: [Key: Suspect] = [:]
    private(set) var heldCount = 0
    private var nextID: UInt64

    init(settings: RepairSettings, seed: UInt64 = .random(in: 1 ... .max)) {
        self.settings = settings
        nextID = seed
    }

    /// Asked for every sequenced message: free while nothing is being repaired.
    func isPending(_ key: Key) -> Bool { !pending.isEmpty && pending[key] != nil }

    private mutating func newID() -> String {
        // Random start, then counted: a reply is matched by it, so no one can guess a live one.
        nextID &+= 0x9E37_79B9_7F4A_7C15
        return String(nextID, radix: 36)
    }

    /// A gap before `message` (which is held): the request to send, unless
    /// one for this input is under way already.
    mutating func gap(_ key: Key, epoch: String, after: Int64, through: Int64, seq: Int64, message: MQTTMessage, nowMs: Int64) -> Ask? {
        suspects[key] = nil
        if pending[key] != nil { _ = hold(key, seq: seq, message: message); return nil }
        let ask = start(key, epoch: epoch, after: after, through: through, nowMs: nowMs)
        _ = hold(key, seq: seq, message: message)
        return ask
    }

    private mutating func start(_ key: Key, epoch: String, after: Int64, through: Int64, nowMs: Int64) -> Ask {
        let id = newID()
        pending[key] = Pending(epoch: epoch, after: after, through: through, id: id, firstAskedMs: nowMs, lastAskedMs: nowMs)
        byID[id] = key
        return Ask(key: key, id: id, request: RepairRequest(epoch: epoch, after: after, through: through))
    }

    /// Holds a message that arrived while its input is being repaired; false
    /// when the bound is reached (it is fetched again by a later repair).
    mutating func hold(_ key: Key, seq: Int64, message: MQTTMessage) -> Bool {
        guard pending[key] != nil, heldCount < settings.maxHeld else { return false }
        pending[key]!.held.append((seq, message))
        heldCount += 1
        return true
    }

    /// The input a reply answers, if it is one of ours still waiting.
    func key(answering id: String) -> Key? { byID[id] }

    /// A page of the range came in and more remains: ask for the rest.
    mutating func askAgain(_ key: Key, after: Int64, nowMs: Int64) -> Ask? {
        guard var p = pending[key] else { return nil }
        p.after = after
        p.lastAskedMs = nowMs
        pending[key] = p
        return Ask(key: key, id: p.id, request: RepairRequest(epoch: p.epoch, after: after, through: p.through))
    }

    /// The repair is over (answered, refused or given up): its range and its
    /// held messages, oldest seq first.
    mutating func finish(_ key: Key) -> Pending? {
        guard var p = pending.removeValue(forKey: key) else { return nil }
        byID[p.id] = nil
        heldCount -= p.held.count
        p.held.sort { $0.seq < $1.seq }
        return p
    }

    /// A producer says it sent `tip` for this input, above what was applied.
    mutating func noteTip(_ key: Key, epoch: String, tip: Int64, nowMs: Int64) {
        guard pending[key] == nil else { return }
        if let s = suspects[key], s.epoch == epoch, s.tip >= tip { return }
        suspects[key] = Suspect(epoch: epoch, tip: tip, sinceMs: suspects[key]?.sinceMs ?? nowMs)
    }

    /// What time asks for: requests to send again, repairs to give up, and
    /// tips that stayed ahead past the grace (the caller checks them against
    /// the marks and starts a repair with `startFromTip`).
    mutating func due(nowMs: Int64) -> (retries: [Ask], expired: [Key], tips: [(Key, Suspect)]) {
        var retries: [Ask] = [], expired: [Key] = [], tips: [(Key, Suspect)] = []
        for (key, p) in pending {
            if nowMs - p.firstAskedMs >= settings.timeoutMs {
                expired.append(key)
            } else if nowMs - p.lastAskedMs >= settings.retryMs {
                pending[key]!.lastAskedMs = nowMs
                retries.append(Ask(key: key, id: p.id, request: RepairRequest(epoch: p.epoch, after: p.after, through: p.through)))
            }
        }
        for (key, s) in suspects where nowMs - s.sinceMs >= settings.tipGraceMs {
            suspects[key] = nil
            tips.append((key, s))
        }
        return (retries, expired, tips)
    }

    /// A tip that stayed ahead: repair up to it.
    mutating func startFromTip(_ key: Key, epoch: String, after: Int64, through: Int64, nowMs: Int64) -> Ask? {
        guard pending[key] == nil, through > after else { return nil }
        return start(key, epoch: epoch, after: after, through: through, nowMs: nowMs)
    }

    /// A batch was rolled back: what it held comes again from the broker, and
    /// the gaps are found again.
    mutating func reset() {
        pending = [:]
        byID = [:]
        suspects = [:]
        heldCount = 0
    }
}

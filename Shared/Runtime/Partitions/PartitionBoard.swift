import Model

/// A partition's lease as the broker keeps it, retained on
/// `{prefix}/_lease/{service}/{k}`: who runs the partition, under which
/// claim, and until when unless renewed (0: released).
public struct Lease: Codable, Sendable, Equatable {
    public var owner: String
    public var epoch: Int64
    public var untilMs: Int64

    public init(owner: String, epoch: Int64, untilMs: Int64) { self.owner = owner; self.epoch = epoch; self.untilMs = untilMs }
}

/// Which partitions this instance runs: a value told what the broker says
/// (the service's live instances, the leases) and the time, which answers
/// with what to do. The runner carries the effects out and reports back
/// when a partition has started or stopped.
///
/// Every instance computes the same assignment from the same view
/// (`PartitionBoard.assign`), claims only a partition whose lease is free,
/// and gives up one that should be another's. Where two views disagree for
/// a moment, the lease's last writer wins, and behind it stand two fences:
/// the partition's MQTT session (a takeover disconnects the older owner)
/// and its store's file lock.
struct PartitionBoard: Sendable {
    enum Effect: Equatable, Sendable {
        /// Publish this lease (retained) for partition k.
        case publish(Int, Lease)
        /// Open the partition's store and session and run it.
        case start(Int)
        /// Stop running the partition (gracefully: commit, checkpoint, close).
        case stop(Int)
    }

    enum Slot: Equatable, Sendable {
        /// Lease published; started once it comes back as ours and settled.
        case claimed(epoch: Int64, atMs: Int64)
        case starting(epoch: Int64)
        case running(epoch: Int64)
        /// Being stopped; `release` publishes the lease as free once it is.
        case stopping(epoch: Int64, release: Bool)

        var epoch: Int64 {
            switch self {
            case .claimed(let e, _), .starting(let e), .running(let e), .stopping(let e, _): e
            }
        }
    }

    let me: String
    let count: Int
    let leaseMs: Int64
    /// How long a claim must stand before the partition is started: the
    /// other instances' claims of the same moment arrive meanwhile.
    let settleMs: Int64
    /// Nothing is claimed before this: the leases and the other instances'
    /// health arrive first (retained, or, on a broker that keeps retained
    /// messages on one node only, with their next renewal or health).
    private(set) var quietUntilMs: Int64
    /// Other instances of the service, and until when each counts as live.
    private(set) var members: [String: Int64] = [:]
    private(set) var leases: [Int: Lease] = [:]
    private(set) var slots: [Int: Slot] = [:]
    private var renewedMs: [Int: Int64] = [:]

    /// `quietMs`: how long to listen before the first claim (at least `settleMs`).
    init(me: String, count: Int, leaseMs: Int64, settleMs: Int64, quietMs: Int64 = 0, nowMs: Int64) {
        self.me = me; self.count = count; self.leaseMs = leaseMs; self.settleMs = settleMs
        quietUntilMs = nowMs + max(settleMs, quietMs)
    }

    /// The partitions running here now.
    var running: [Int] { slots.compactMap { if case .running = $0.value { $0.key } else { nil } }.sorted() }

    /// The control connection is back after a drop. What it heard of the
    /// others before is stale: a broker that stops sends every client's
    /// will, so each instance heard all the others die. Nothing is claimed
    /// until each live instance's health came again (`quietMs`: two health
    /// intervals), and claims not yet confirmed are dropped.
    mutating func reconnected(nowMs: Int64, quietMs: Int64) {
        members.removeAll()
        quietUntilMs = nowMs + quietMs
        slots = slots.filter { if case .claimed = $0.value { false } else { true } }
    }

    mutating func member(_ instance: String, liveUntilMs: Int64?) {
        guard instance != me else { return }
        members[instance] = liveUntilMs
    }

    mutating func lease(_ k: Int, _ lease: Lease?) {
        guard (0..<count).contains(k) else { return }
        leases[k] = lease
    }

    /// A start finished: running, or (the store is still locked by the last
    /// owner, or could not be opened) claimed again, to be tried once more.
    mutating func started(_ k: Int, ok: Bool, nowMs: Int64) {
        guard case .starting(let epoch) = slots[k] else { return }
        slots[k] = ok ? .running(epoch: epoch) : .claimed(epoch: epoch, atMs: nowMs)
    }

    /// Cut off from the broker for half a lease: it can renew nothing, and
    /// the others may take its partitions once its leases run out, so it
    /// stops every one now, before they can (it keeps the leases: releasing
    /// needs the broker, and they run out by themselves).
    mutating func fence() -> [Effect] {
        var effects: [Effect] = []
        for (k, slot) in slots.sorted(by: { $0.key < $1.key }) {
            switch slot {
            case .claimed: slots[k] = nil
            case .starting(let epoch), .running(let epoch):
                slots[k] = .stopping(epoch: epoch, release: false)
                effects.append(.stop(k))
            case .stopping: continue
            }
        }
        return effects
    }

    /// The instance is stopping: partition k is being stopped, and released once it is.
    mutating func leaving(_ k: Int) {
        guard let slot = slots[k] else { return }
        slots[k] = .stopping(epoch: slot.epoch, release: true)
    }

    /// A partition stopped by itself (its session was taken over) or on request.
    mutating func stopped(_ k: Int) -> [Effect] {
        guard let slot = slots.removeValue(forKey: k) else { return [] }
        renewedMs[k] = nil
        if case .stopping(let epoch, true) = slot { return [.publish(k, Lease(owner: me, epoch: epoch, untilMs: 0))] }
        return []
    }

    /// The instances that count as live now, this one included, sorted.
    func liveMembers(nowMs: Int64) -> [String] {
        (members.filter { $0.value > nowMs }.map(\.key) + [me]).sorted()
    }

    mutating func tick(nowMs: Int64) -> [Effect] {
        let live = liveMembers(nowMs: nowMs)
        let liveSet = Set(live)
        func holder(_ k: Int) -> String? {
            guard let lease = leases[k], lease.untilMs > nowMs, liveSet.contains(lease.owner) else { return nil }
            return lease.owner
        }
        let desired = Self.assign(count: count, members: live, holders: (0..<count).map(holder))
        var effects: [Effect] = []
        for k in 0..<count {
            let lease = leases[k]
            let mine = desired[k] == me
            switch slots[k] {
            case nil:
                guard mine, nowMs >= quietUntilMs else { continue }
                // Free: never leased, released, expired, or its owner is gone (or is an earlier run of this instance).
                guard holder(k) == nil || lease?.owner == me else { continue }
                let epoch = (lease?.epoch ?? 0) + 1
                slots[k] = .claimed(epoch: epoch, atMs: nowMs)
                effects.append(renew(k, epoch: epoch, nowMs: nowMs))
            case .claimed(let epoch, let at):
                if let lease, lease.owner != me, lease.epoch >= epoch {
                    slots[k] = nil  // another instance's claim came after ours: it won
                } else if !mine {
                    slots[k] = nil
                    effects.append(.publish(k, Lease(owner: me, epoch: epoch, untilMs: 0)))
                } else if lease?.owner == me, lease?.epoch == epoch, nowMs >= at + settleMs {
                    slots[k] = .starting(epoch: epoch)
                    effects.append(.start(k))
                } else if let renewal = renewIfDue(k, epoch: epoch, nowMs: nowMs) {
                    effects.append(renewal)
                }
            case .starting(let epoch), .running(let epoch):
                if let lease, lease.owner != me, lease.epoch >= epoch {
                    slots[k] = .stopping(epoch: epoch, release: false)  // taken: stop, and leave the lease to its owner
                    effects.append(.stop(k))
                } else if !mine {
                    slots[k] = .stopping(epoch: epoch, release: true)
                    effects.append(.stop(k))
                } else if let renewal = renewIfDue(k, epoch: epoch, nowMs: nowMs) {
                    effects.append(renewal)
                }
            case .stopping:
                continue
            }
        }
        return effects
    }

    private mutating func renew(_ k: Int, epoch: Int64, nowMs: Int64) -> Effect {
        renewedMs[k] = nowMs
        return .publish(k, Lease(owner: me, epoch: epoch, untilMs: nowMs + leaseMs))
    }

    /// A lease is renewed three times within its length, so one lost renewal costs nothing.
    private mutating func renewIfDue(_ k: Int, epoch: Int64, nowMs: Int64) -> Effect? {
        guard nowMs - (renewedMs[k] ?? .min / 2) >= leaseMs / 3 else { return nil }
        return renew(k, epoch: epoch, nowMs: nowMs)
    }

    /// Partition → instance: each live instance gets an equal share (the
    /// first in order one more, where it does not divide); a partition stays
    /// with its holder while the holder is within its share, and the rest go
    /// to those below theirs, in order. The same view gives the same answer
    /// in every instance, and an instance joining or leaving moves only the
    /// partitions it must.
    static func assign(count: Int, members: [String], holders: [String?]) -> [String] {
        precondition(!members.isEmpty)
        let base = count / members.count, extra = count % members.count
        var quota = Dictionary(uniqueKeysWithValues: members.enumerated().map { ($1, base + ($0 < extra ? 1 : 0)) })
        var owner = [String?](repeating: nil, count: count)
        for k in 0..<count {
            if let holder = holders[k], let left = quota[holder], left > 0 {
                owner[k] = holder
                quota[holder] = left - 1
            }
        }
        var next = 0
        for k in 0..<count where owner[k] == nil {
            while quota[members[next]]! == 0 { next += 1 }
            owner[k] = members[next]
            quota[members[next]]! -= 1
        }
        return owner.map { $0! }
    }
}

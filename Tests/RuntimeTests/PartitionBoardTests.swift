import Model
@testable import Runtime
import Testing

/// The lease board's decisions, with instances, a broker's retained leases
/// and the stores' file locks simulated, and time driven by hand.
@Suite struct PartitionBoardTests {
    /// A few instances of one service around one broker.
    struct Cluster {
        let count: Int
        let leaseMs: Int64 = 10_000
        var nowMs: Int64 = 1_000_000
        var boards: [String: PartitionBoard] = [:]
        /// The broker's retained leases.
        var leases: [Int: Lease] = [:]
        /// Store locks: partition → instance (the kernel's flock).
        var locks: [Int: String] = [:]
        /// Partitions each instance runs (started and not stopped).
        var running: [String: Set<Int>] = [:]
        /// Instances gone whose last health said offline (their will, or their farewell).
        var gone: Set<String> = []
        /// Starts refused because another instance still held the store.
        var lockRefusals = 0
        /// Health comes every this many steps (a quarter second each).
        var healthEvery = 1
        private var steps = 0

        init(count: Int) { self.count = count }

        mutating func add(_ name: String) {
            var board = PartitionBoard(me: name, count: count, leaseMs: leaseMs, settleMs: 1_000, nowMs: nowMs)
            for (k, lease) in leases { board.lease(k, lease) }  // the retained leases arrive on subscribing
            boards[name] = board
            running[name] = []
        }

        /// kill -9: its locks go with the process; its will says offline.
        mutating func kill(_ name: String) {
            boards[name] = nil
            running[name] = nil
            locks = locks.filter { $0.value != name }
            gone.insert(name)
        }

        /// A graceful stop: every partition stopped and released, then gone.
        mutating func stop(_ name: String) {
            for k in running[name] ?? [] {
                boards[name]!.leaving(k)
                finishStop(name, k)
            }
            boards[name] = nil
            running[name] = nil
            gone.insert(name)
        }

        mutating func finishStop(_ name: String, _ k: Int) {
            running[name]?.remove(k)
            if locks[k] == name { locks[k] = nil }
            if let effects = boards[name]?.stopped(k) { apply(effects, of: name) }
        }

        mutating func apply(_ effects: [PartitionBoard.Effect], of name: String) {
            for effect in effects {
                switch effect {
                case .publish(let k, let lease):
                    leases[k] = lease
                    for other in boards.keys { boards[other]!.lease(k, lease) }
                case .start(let k):
                    if let holder = locks[k], holder != name {
                        lockRefusals += 1
                        boards[name]!.started(k, ok: false, nowMs: nowMs)
                    } else {
                        locks[k] = name
                        running[name]!.insert(k)
                        boards[name]!.started(k, ok: true, nowMs: nowMs)
                    }
                case .stop(let k):
                    finishStop(name, k)
                }
            }
        }

        /// One tick of every instance (250 ms), health exchanged first.
        mutating func step() {
            nowMs += 250
            steps += 1
            let live = Array(boards.keys)
            for name in live {
                if steps % healthEvery == 0 {
                    for other in live where other != name { boards[name]!.member(other, liveUntilMs: nowMs + 15_000) }
                }
                for other in gone { boards[name]!.member(other, liveUntilMs: nil) }
            }
            for name in live.sorted() {
                guard var board = boards[name] else { continue }
                let effects = board.tick(nowMs: nowMs)
                boards[name] = board
                apply(effects, of: name)
            }
        }

        /// Steps until every partition runs in exactly one live instance with
        /// an even split, or `limitMs` passes; returns how long it took.
        mutating func settle(limitMs: Int64 = 60_000) -> Int64? {
            let start = nowMs
            while nowMs - start <= limitMs {
                step()
                if isSettled { return nowMs - start }
            }
            return nil
        }

        var isSettled: Bool {
            let live = boards.keys.sorted()
            guard !live.isEmpty else { return false }
            let owners = (0..<count).map { k in live.filter { running[$0]!.contains(k) } }
            guard owners.allSatisfy({ $0.count == 1 }) else { return false }
            let shares = live.map { running[$0]!.count }
            return shares.max()! - shares.min()! <= 1
        }

        /// No partition runs in two instances at once.
        var isExclusive: Bool {
            (0..<count).allSatisfy { k in running.values.filter { $0.contains(k) }.count <= 1 }
        }
    }

    @Test func oneInstanceTakesEveryPartition() {
        var cluster = Cluster(count: 16)
        cluster.add("a")
        let took = cluster.settle()
        #expect(took != nil)
        #expect(took! <= 2_500, "claims wait a second for the retained leases, then a second to settle")
        #expect(cluster.running["a"] == Set(0..<16))
    }

    @Test func instancesShareThePartitionsEvenlyAsTheyComeAndGo() {
        var cluster = Cluster(count: 16)
        cluster.add("a")
        #expect(cluster.settle() != nil)
        // Scaling 1 → 2 → 3 → 2, each step handing partitions over gracefully.
        cluster.add("b")
        #expect(cluster.settle() != nil)
        #expect(cluster.running["a"]!.count == 8 && cluster.running["b"]!.count == 8)
        cluster.add("c")
        #expect(cluster.settle() != nil)
        #expect(cluster.running.values.map(\.count).sorted() == [5, 5, 6])
        let before = cluster.running
        cluster.stop("b")
        #expect(cluster.settle() != nil)
        #expect(cluster.running.values.map(\.count).sorted() == [8, 8])
        // Only b's partitions moved: a and c kept theirs.
        #expect(before["a"]!.isSubset(of: cluster.running["a"]!))
        #expect(before["c"]!.isSubset(of: cluster.running["c"]!))
        #expect(cluster.isExclusive)
    }

    /// kill -9: the will says the instance is gone at once, and the survivors
    /// take its partitions from the store it left (its lock went with it).
    @Test func survivorsTakeADeadInstancesPartitionsAtOnce() {
        var cluster = Cluster(count: 16)
        cluster.add("a"); cluster.add("b")
        #expect(cluster.settle() != nil)
        cluster.kill("a")
        let took = cluster.settle()
        #expect(took != nil)
        #expect(took! <= 3_000, "\(String(describing: took)) ms")
        #expect(cluster.running["b"] == Set(0..<16))
    }

    /// A dead instance whose will never came (a machine lost with its
    /// network): its leases expire, and then the survivors take over, well
    /// within 15 s of its last renewal.
    @Test func survivorsTakeOverOnceTheLeasesOfASilentInstanceExpire() {
        var cluster = Cluster(count: 16)
        cluster.add("a"); cluster.add("b")
        #expect(cluster.settle() != nil)
        // Its health still counts it live for 15 s (three intervals), its leases hold 10 s.
        let lastRenewal = cluster.leases.values.filter { $0.owner == "a" }.map(\.untilMs).min()! - cluster.leaseMs
        cluster.boards["a"] = nil
        cluster.running["a"] = nil
        cluster.locks = cluster.locks.filter { $0.value != "a" }
        var at: Int64?
        for _ in 0..<200 {
            cluster.nowMs += 250
            for name in cluster.boards.keys { cluster.boards[name]!.member("a", liveUntilMs: lastRenewal + 15_000) }
            let effects = cluster.boards["b"]!.tick(nowMs: cluster.nowMs)
            cluster.apply(effects, of: "b")
            if cluster.running["b"] == Set(0..<16) { at = cluster.nowMs; break }
        }
        #expect(at != nil)
        #expect(at! - lastRenewal <= 17_000, "\(at! - lastRenewal) ms after the last renewal")
    }

    /// Two instances that start in the same moment, each before it has
    /// seen the other, claim every partition: the broker keeps the last
    /// claim of each, only its author starts, and the two then share evenly,
    /// without the store locks ever having to refuse a start.
    @Test func claimsOfTheSameMomentNeverRunAPartitionTwice() {
        var cluster = Cluster(count: 4)
        cluster.add("a"); cluster.add("b")
        cluster.nowMs += 1_000
        for name in ["a", "b"] {
            var board = cluster.boards[name]!
            let claims = board.tick(nowMs: cluster.nowMs)
            cluster.boards[name] = board
            #expect(claims.count == 4, "\(name) claims all four, alone as far as it knows")
            cluster.apply(claims, of: name)
        }
        var exclusive = true
        for _ in 0..<40 {
            cluster.step()
            exclusive = exclusive && cluster.isExclusive
        }
        #expect(exclusive)
        #expect(cluster.lockRefusals == 0)
        #expect(cluster.isSettled)
    }

    /// An instance that finds its partition's lease taken by a newer claim
    /// (it was paused, and the others gave it up for dead) stops at once and
    /// leaves the lease to the new owner.
    @Test func anOwnerWhoseLeaseWasTakenStopsWithoutReleasingIt() {
        var a = PartitionBoard(me: "a", count: 1, leaseMs: 10_000, settleMs: 1_000, nowMs: 0)
        var effects: [PartitionBoard.Effect] = []
        for now in stride(from: Int64(250), through: 3_000, by: 250) {
            for effect in a.tick(nowMs: now) {
                if case .publish(let k, let lease) = effect { a.lease(k, lease) }
                effects.append(effect)
            }
            if effects.contains(.start(0)) { a.started(0, ok: true, nowMs: now); break }
        }
        #expect(a.running == [0])
        a.lease(0, Lease(owner: "b", epoch: 2, untilMs: 20_000))
        a.member("b", liveUntilMs: 20_000)
        #expect(a.tick(nowMs: 3_250) == [.stop(0)])
        #expect(a.stopped(0) == [], "no release: the lease is b's")
    }

    /// A broker that stops sends every client's will: each instance hears
    /// all the others die, just before its own connection drops. Back on a
    /// restarted broker, it waits for their health before deciding anything,
    /// so nothing changes hands.
    @Test func aBrokerRestartMovesNoPartition() {
        var cluster = Cluster(count: 16)
        cluster.add("a"); cluster.add("b"); cluster.add("c")
        #expect(cluster.settle() != nil)
        let before = cluster.running
        cluster.healthEvery = 4  // every second
        let names = Array(cluster.boards.keys)
        for name in names {
            for other in names where other != name { cluster.boards[name]!.member(other, liveUntilMs: nil) }
            cluster.boards[name]!.reconnected(nowMs: cluster.nowMs, quietMs: 1_500)
        }
        for _ in 0..<40 { cluster.step() }
        #expect(cluster.running == before)
        #expect(cluster.leases.values.map(\.epoch).max() == 1, "no partition was claimed again")
    }

    /// An instance cut off from the broker (its network, or its broker node,
    /// gone) stops its partitions after half a lease, before the others can
    /// take them when its leases run out: no partition runs twice, and no
    /// store lock ever has to refuse the new owner.
    @Test func anInstanceCutOffStopsItsPartitionsBeforeOthersTakeThem() {
        var cluster = Cluster(count: 8)
        cluster.add("a"); cluster.add("b")
        #expect(cluster.settle() != nil)
        var a = cluster.boards.removeValue(forKey: "a")!  // cut off: it hears nothing, and nothing it says arrives
        let cutAt = cluster.nowMs
        let lastHealth = cluster.nowMs
        var exclusive = true, fenced = false
        for _ in 0..<120 {
            cluster.nowMs += 250
            if !fenced, cluster.nowMs - cutAt >= cluster.leaseMs / 2 {
                for effect in a.fence() {
                    if case .stop(let k) = effect {
                        cluster.running["a"]?.remove(k)
                        if cluster.locks[k] == "a" { cluster.locks[k] = nil }
                        #expect(a.stopped(k) == [], "no release: it cannot reach the broker")
                    }
                }
                fenced = true
            }
            cluster.boards["b"]!.member("a", liveUntilMs: lastHealth + 15_000)
            let effects = cluster.boards["b"]!.tick(nowMs: cluster.nowMs)
            cluster.apply(effects, of: "b")
            exclusive = exclusive && cluster.isExclusive
        }
        #expect(a.running.isEmpty)
        #expect(cluster.running["b"] == Set(0..<8))
        #expect(exclusive)
        #expect(cluster.lockRefusals == 0)
    }

    @Test func theAssignmentKeepsHoldersWithinTheirShare() {
        let holders: [String?] = ["a", "a", "a", "a", nil, nil, "b", "x"]
        let owners = PartitionBoard.assign(count: 8, members: ["a", "b", "c"], holders: holders)
        #expect(owners == ["a", "a", "a", "b", "b", "c", "b", "c"])
        #expect(Array(owners[0..<3]) == ["a", "a", "a"], "a keeps three of its four: its share")
        #expect(owners[6] == "b", "b keeps its own")
        #expect(Dictionary(grouping: owners, by: { $0 }).mapValues(\.count) == ["a": 3, "b": 3, "c": 2])
    }
}

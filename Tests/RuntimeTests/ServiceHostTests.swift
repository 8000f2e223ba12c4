import Bus
import Foundation
import TrackerLog
import Model
@testable import Runtime
import Store
import TestSupport
import Testing

/// A message of the test service: numbered like every internal message.
struct Item: Codable, Sequenced {
    var seq: Int64
    var epoch: String?
    var value: Int64
    /// "refuse" (bad input), "store" (a store error of its own), "disk" (the machine's).
    var fail: String?
}

struct Tally: Codable, Equatable {
    var total: Int64 = 0
    var applied: [Int64] = []
}

/// A service with one sequenced input (`raw`), one external one (`fixes`),
/// an outbox log and a command: small enough to check the host alone.
func tallyService(keep: Int = 1_000, maxTotal: Int? = nil, sweep: SweepRoute<Tally>? = nil) -> ServiceDefinition<Tally> {
    ServiceDefinition(name: "filter", migrations: [("items", DeviceLog.schema("items"))], rows: .json(fresh: { Tally() })) { db in
        let items = try DeviceLog(db: db, table: "items")
        let apply: (Item, Work<Tally>) throws -> Void = { item, work in
            switch item.fail {
            case "refuse": throw InputRefusal(.badInput, "value: refused")
            case "store": throw StoreError(code: 19, message: "constraint failed", sql: nil)
            case "disk": throw StoreError(code: 13, message: "database or disk is full", sql: nil)
            default: break
            }
            work.row.total += item.value
            work.row.applied.append(item.seq)
            try work.send(seq: item.seq, sessionID: nil, timeMs: nil, body: Array("\(item.value)".utf8))
            work.emit(.diagnostic(code: "applied", message: "\(item.seq)"))
        }
        return Routes(
            inputs: [.sequenced("raw", decode: { try JSONDecoder().decode(Item.self, from: Data($0)) }, apply: apply)],
            commands: [
                CommandRoute("getDecisions") { _, work in work.row.total },
                CommandRoute("getRawPoints") { _, _ in throw CommandError(.notReady, "off") },
            ],
            outbox: OutboxRoute(log: items) { "\($0.prefix)/\($1)/points" },
            retention: [LogRetention(items, keepPerDevice: keep, maxTotal: maxTotal)],
            sweep: sweep,
            startOver: { _, _ in Tally() })  // an item's seq is its input's
    }
}

/// A host over a temporary database, driven as the network loop drives it.
final class HostHarness {
    let bus = RecordingBus()
    let counters = HealthCounters()
    let path: String
    let pauses = PauseLog()
    let clock = ManualClock()
    /// The database the harness made when the test brought no path of its own.
    private let database: TemporaryDatabase?
    var host: ServiceHost<Tally>!

    let budgetBytes: Int
    let sweep: SweepRoute<Tally>?

    init(capacity: Int = 100, budgetBytes: Int = 8 << 20, keep: Int = 1_000, path: String? = nil, sweep: SweepRoute<Tally>? = nil) throws {
        self.budgetBytes = budgetBytes
        self.sweep = sweep
        database = path == nil ? TemporaryDatabase("host") : nil
        self.path = path ?? database!.path
        host = try make(capacity: capacity, keep: keep)
    }

    func make(capacity: Int, keep: Int) throws -> ServiceHost<Tally> {
        try ServiceHost(tallyService(keep: keep, sweep: sweep), databasePath: path, bus: bus, topics: Topics(), logger: Logger(label: "test", minimum: .off),
                        counters: counters, clock: clock, cacheCapacity: capacity, cacheBudgetBytes: budgetBytes,
                        pause: { [pauses] in pauses.record($0) }).runningParts()
    }

    /// A fresh host on the same file, as after kill -9 (nothing closed, nothing saved).
    func restart() throws {
        host = nil
        host = try make(capacity: 100, keep: 1_000)
    }

    func item(_ device: String, _ seq: Int64, _ value: Int64, fail: String? = nil, epoch: String? = "e1") -> MQTTMessage {
        MQTTMessage(topic: "tracker/\(device)/raw", payload: JSONCoding.bytes(Item(seq: seq, epoch: epoch, value: value, fail: fail)))
    }

    /// One pass of the loop: these messages read, then the commit hook.
    @discardableResult
    func pass(_ messages: [MQTTMessage]) -> Bool {
        messages.forEach(host.receive)
        return host.commit()
    }

    func events(_ code: String) -> [String] {
        bus.events().compactMap { if case .diagnostic(code, let m) = $0.body { m } else if case .error(code, let m) = $0.body { m } else { nil } }
    }

    func total(_ device: String) throws -> Int64? {
        let command = MQTTMessage(topic: "tracker/\(device)/cmd/getDecisions", payload: [], responseTopic: "tracker/\(device)/reply/total")
        bus.clear()
        pass([command])
        let reply = try #require(bus.messages(topicSuffix: "tracker/\(device)/reply/total").last)
        return try JSONDecoder().decode(CommandReply.self, from: Data(reply.payload)).result?.int64Value
    }
}

final class PauseLog: @unchecked Sendable {
    private(set) var pauses: [Duration] = []
    func record(_ d: Duration) { pauses.append(d) }
}

@Suite struct ServiceHostTests {
    @Test func aRefusedMessageUndoesOnlyItselfAndNothingIsPublishedBeforeTheCommit() throws {
        let h = try HostHarness()
        h.host.receive(h.item("a", 1, 5))
        h.host.receive(h.item("a", 2, 7, fail: "refuse"))
        h.host.receive(h.item("a", 3, 11))
        #expect(h.bus.messages.isEmpty)  // read, not yet committed: nothing leaves
        #expect(h.host.commit())
        #expect(h.bus.messages(topicSuffix: "/points").map(\.string) == ["5", "11"])
        #expect(h.events("badInput") == ["value: refused"])
        #expect(h.events("applied") == ["1", "3"])
        #expect(try h.total("a") == 16)
    }

    @Test func aBatchThatCannotBeStoredIsNotAcknowledgedAndLeavesNoTrace() throws {
        let h = try HostHarness()
        #expect(h.pass([h.item("a", 1, 5)]))
        h.bus.clear()
        // A store failure: the whole batch rolls back, nothing is published, the hook says "do not acknowledge".
        #expect(!h.pass([h.item("a", 2, 7), h.item("a", 3, 1, fail: "store")]))
        #expect(h.bus.messages.isEmpty)
        #expect(try h.total("a") == 5)
        // The broker redelivers; without the culprit's fault (say it was fixed) all of it applies once.
        #expect(h.pass([h.item("a", 2, 7), h.item("a", 3, 1)]))
        #expect(try h.total("a") == 13)
        #expect(h.counters.snapshot().extra["storeFailures"] == 1)
    }

    @Test func aMessageThatKeepsFailingIsDroppedLoudlyAndTheRestFlows() throws {
        let h = try HostHarness()
        let batch = [h.item("a", 1, 5), h.item("a", 2, 7, fail: "store"), h.item("a", 3, 11)]
        for _ in 1...FailedAttempts.limit { #expect(!h.pass(batch)) }
        // The next redelivery drops the culprit with an error event; its neighbours are stored.
        #expect(h.pass(batch))
        #expect(h.events("internal").count == 1)
        #expect(try h.total("a") == 16)
        #expect(h.counters.snapshot().extra["dropped"] == 1)
    }

    @Test func aFullDiskNeverDropsAMessage() throws {
        let h = try HostHarness()
        let batch = [h.item("a", 1, 5, fail: "disk")]
        for _ in 1...(FailedAttempts.limit + 3) { #expect(!h.pass(batch)) }
        #expect(h.counters.snapshot().extra["dropped"] == nil)
        #expect(h.events("internal").allSatisfy { $0.contains("disk full") })
        // Each redelivery waits longer: 50 ms doubling.
        #expect(h.pauses.pauses == [50, 100, 200, 400, 800, 1_600].map { .milliseconds($0) })
        #expect(h.pass([h.item("a", 1, 5)]))
        #expect(try h.total("a") == 5)
    }

    @Test func everySeqIsAppliedOnceAndANewProducerEpochStartsOver() throws {
        let h = try HostHarness()
        h.pass([h.item("a", 1, 1), h.item("a", 2, 2), h.item("a", 2, 2), h.item("a", 1, 1)])
        h.pass([h.item("a", 2, 2), h.item("a", 3, 3)])
        #expect(try h.total("a") == 6)
        #expect(h.counters.snapshot().extra["redelivered"] == 3)
        // The producer lost its store and numbers from 1 again: announced once, applied.
        h.bus.clear()
        h.pass([h.item("a", 1, 10, epoch: "e2"), h.item("a", 2, 20, epoch: "e2")])
        #expect(h.events("producerReset").count == 1)
        #expect(try h.total("a") == 36)
        // Watermarks survive a restart with the rows.
        try h.restart()
        h.pass([h.item("a", 2, 20, epoch: "e2"), h.item("a", 3, 30, epoch: "e2")])
        #expect(try h.total("a") == 66)
    }

    @Test func theOutboxIsPublishedAfterCommitAndRepublishedAfterACrash() throws {
        let h = try HostHarness()
        h.host.connected(reconnect: false)
        h.pass((1...5).map { h.item("a", Int64($0), Int64($0)) })
        #expect(h.bus.messages(topicSuffix: "/points").count == 5)
        #expect(h.host.queueDepthForTests == 5)
        h.bus.acknowledgeAll()
        #expect(h.host.queueDepthForTests == 0)
        h.host.tick()  // saves the watermark (5)
        #expect(h.host.commit())
        h.pass((6...8).map { h.item("a", Int64($0), Int64($0)) })  // published, never acknowledged
        // kill -9: a new host republishes exactly what the broker never confirmed.
        h.bus.clear()
        try h.restart()
        h.host.connected(reconnect: false)
        #expect(h.bus.messages(topicSuffix: "/points").map(\.string) == ["6", "7", "8"])
        // A reconnect is the bus's business (it resends by itself): nothing again from here.
        h.bus.clear()
        h.host.connected(reconnect: true)
        #expect(h.bus.messages.isEmpty)
    }

    @Test func theOutboxLogIsTrimmedToItsRetentionOnlyBelowTheAcknowledged() throws {
        let h = try HostHarness(keep: 10)
        h.pass((1...300).map { h.item("a", Int64($0), 1) })
        // Nothing acknowledged yet: nothing may go.
        h.host.tick(); #expect(h.host.commit())
        #expect(try h.host.logCountForTests("items", "a") == 300)
        h.bus.acknowledgeAll()
        // The device fell quiet: its watermark is saved alone once it has waited unsaved that long, and the log trimmed below it.
        h.clock.advance(by: .milliseconds(ServiceHost<Tally>.quietWatermarkMs))
        h.host.tick(); #expect(h.host.commit())
        #expect(try h.host.logCountForTests("items", "a") == 10)
    }

    @Test func aDevicesWatermarkIsSavedWithItsRowAndAQuietOnesByTheTickOnceItWaited() throws {
        let h = try HostHarness()
        func saved(_ device: String) throws -> Int64? { try h.host.store.entry(DeviceID(device)!)?.ackedThrough }
        h.pass([h.item("a", 1, 1), h.item("b", 1, 1)])
        h.bus.acknowledgeAll()
        // A tick soon after writes neither watermark on its own: a device that keeps sending carries it with its row.
        h.host.tick(); #expect(h.host.commit())
        #expect(try saved("a") == 0 && saved("b") == 0)
        h.pass([h.item("a", 2, 1)])
        #expect(try saved("a") == 1, "written with a's row: what the broker had acknowledged at that commit")
        #expect(try saved("b") == 0)
        h.bus.acknowledgeAll()
        // b fell quiet: the tick saves its watermark once it has waited unsaved quietWatermarkMs, and a's too.
        h.clock.advance(by: .milliseconds(ServiceHost<Tally>.quietWatermarkMs - 1))
        h.host.tick(); #expect(h.host.commit())
        #expect(try saved("b") == 0)
        h.clock.advance(by: .milliseconds(1))
        h.host.tick(); #expect(h.host.commit())
        #expect(try saved("a") == 2 && saved("b") == 1)
        // A batch that fails leaves the watermark it carried unsaved, to be written again.
        h.pass([h.item("a", 3, 1)])
        h.bus.acknowledgeAll()
        #expect(!h.pass([h.item("a", 4, 1), h.item("a", 5, 1, fail: "store")]))
        #expect(try saved("a") == 2)
        h.pass([h.item("a", 4, 1)])
        #expect(try saved("a") == 3)
    }

    @Test func memoryIsBoundedByTheCacheAndEvictedDevicesLoadAgain() throws {
        let h = try HostHarness(capacity: 50)
        for round in 1...3 {
            h.pass((0..<500).map { h.item("d\($0)", Int64(round), Int64(round)) })
            #expect(h.host.cachedDevices <= 55)
        }
        // Every device, evicted or not, has all three rounds.
        for device in ["d0", "d250", "d499"] { #expect(try h.total(device) == 6) }
    }

    /// The budget is in bytes: a device whose state is big takes more of it.
    /// Over it, devices leave (those loaded and not used again first), and load again when they speak.
    @Test func memoryIsBoundedByTheBudgetInBytes() throws {
        let h = try HostHarness(capacity: 10_000, budgetBytes: 64_000)
        for round in 1...3 {
            h.pass((0..<500).map { h.item("d\($0)", Int64(round), Int64(round)) })
            #expect(h.host.cachedBytes <= 64_000)
            #expect((20...100).contains(h.host.cachedDevices), "\(h.host.cachedDevices) devices in \(h.host.cachedBytes) bytes")
        }
        for device in ["d0", "d250", "d499"] { #expect(try h.total(device) == 6) }
    }

    @Test func commandsAreRoutedGuardedAndAnswered() throws {
        let h = try HostHarness()
        h.pass([MQTTMessage(topic: "tracker/_fleet/cmd/getDecisions", payload: [], responseTopic: "tracker/_ctl/t/r1"),
                MQTTMessage(topic: "tracker/a/cmd/getRawPoints", payload: Array("{".utf8), responseTopic: "tracker/a/reply/r2"),
                MQTTMessage(topic: "tracker/a/cmd/getRawPoints", payload: [], responseTopic: "tracker/a/reply/r3")])
        let replies = Dictionary(uniqueKeysWithValues: h.bus.messages.map {
            ($0.topic, try! JSONDecoder().decode(CommandReply.self, from: Data($0.payload)))
        })
        #expect(replies["tracker/_ctl/t/r1"]?.code == "badInput")  // a per-device command sent to _fleet
        #expect(replies["tracker/a/reply/r2"]?.code == "badInput")  // not JSON
        #expect(replies["tracker/a/reply/r3"]?.code == "notReady")  // the service's own refusal
    }
}

@Suite struct ServiceHostFailureTests {
    @Test func aFullDiskIsSaidOnceInHealthAndAsAnEventAndNothingIsLost() throws {
        let h = try HostHarness()
        #expect(h.pass([h.item("a", 1, 1)]))
        // The disk fills up: SQLite's page limit makes every new page fail with SQLITE_FULL.
        let pages = try h.host.db.first("PRAGMA page_count") { $0.int(0) } ?? 0
        try h.host.db.execute("PRAGMA max_page_count = \(pages)")
        let big = (2...400).map { h.item("a", Int64($0), 1) }
        for _ in 0..<5 { #expect(!h.pass(big)) }
        #expect(h.counters.snapshot().note?.hasPrefix("disk full") == true)
        #expect(h.events("internal").count == 1)  // once, not on every retry
        // Room again: the redelivered batch is stored whole, the note goes.
        try h.host.db.execute("PRAGMA max_page_count = 1000000")
        #expect(h.pass(big))
        #expect(h.counters.snapshot().note == nil)
        #expect(try h.total("a") == 400)
    }

    @Test func aSeqAbsurdlyFarAheadIsRefusedAndTheWatermarkStays() throws {
        let h = try HostHarness()
        h.pass([h.item("a", 1, 1), h.item("a", 9_000_000_000_000_000_000, 100), h.item("a", 2, 2)])
        #expect(h.events("badInput").first?.contains("seq 9000000000000000000 is not within") == true)
        #expect(try h.total("a") == 3)  // 1 and 2 applied; the forged one never moved the watermark
    }

    @Test func aProducerThatDoesNotSayWhatADeviceStartsOverWithIsRefused() throws {
        var definition = tallyService()
        let wire = definition.wire
        definition.wire = { db in
            var routes = try wire(db)
            routes.startOver = nil
            return routes
        }
        let database = TemporaryDatabase("no-start-over")
        #expect {
            try ServiceHost(definition, databasePath: database.path, bus: RecordingBus(), topics: Topics(), logger: Logger(label: "test", minimum: .off),
                            counters: HealthCounters(), clock: ManualClock())
        } throws: { error in
            (error as? ConfigError).map { $0.problem.contains("startOver") } ?? false
        }
    }

    @Test func aDamagedStoreStopsTheServiceNamingTheFile() throws {
        let database = TemporaryDatabase("damaged"), path = database.path
        try Data(repeating: 0x5A, count: 8_192).write(to: URL(fileURLWithPath: path))
        #expect { try HostHarness(path: path) } throws: { error in
            (error as? ConfigError).map { $0.problem.contains(path) && $0.problem.contains("cannot be used") } ?? false
        }
    }
}

@Suite struct LogTotalTests {
    @Test func aLogOverItsTotalIsCutToAnEqualShareNeverBelowTheAcknowledged() throws {
        let database = TemporaryDatabase("cap"), path = database.path
        let bus = RecordingBus()
        let host = try ServiceHost(tallyService(keep: 1_000, maxTotal: 1_000), databasePath: path, bus: bus, topics: Topics(),
                                   logger: Logger(label: "test", minimum: .off), counters: HealthCounters(), pause: { _ in })
        func item(_ d: Int, _ seq: Int) -> MQTTMessage {
            MQTTMessage(topic: "tracker/d\(d)/raw", payload: JSONCoding.bytes(Item(seq: Int64(seq), epoch: "e", value: 1)))
        }
        // 20 devices × 100 entries = 2,000 in a log allowed 1,000 in all.
        for seq in 1...100 { (0..<20).forEach { host.receive(item($0, seq)) }; #expect(host.commit()) }
        // Nothing acknowledged yet: an outbox keeps all of it, whatever the cap.
        host.tick(); #expect(host.commit())
        #expect(try host.logCountForTests("items") == 2_000)
        bus.acknowledgeAll()
        host.tick(); #expect(host.commit())  // watermarks saved (per-device keep of 1,000 trims nothing)
        host.tick(); #expect(host.commit())  // over the total: each device keeps 1,000 × 90 % / 20 = 45
        #expect(try host.logCountForTests("items") == 900)
        #expect(try host.logCountForTests("items", "d7") == 45)
        // New entries keep to the share too.
        for seq in 101...164 { (0..<20).forEach { host.receive(item($0, seq)) }; #expect(host.commit()) }
        bus.acknowledgeAll()
        host.tick(); #expect(host.commit())
        #expect(try host.logCountForTests("items") <= 1_000)
    }
}

/// A partition's host after the stores were repartitioned: its session may
/// still hold messages of devices that now belong to another partition.
@Suite struct PartitionOwnerTests {
    @Test func aMessageOfAnotherPartitionsDeviceGoesOnToThatPartitionOnceCommitted() throws {
        let database = TemporaryDatabase("partition")
        let bus = RecordingBus()
        let four = Partitioning(count: 4)
        let host = try ServiceHost(tallyService(), databasePath: database.path, bus: bus, topics: Topics().partitioned(four),
                                   logger: Logger(label: "test", minimum: .off), counters: HealthCounters(), partition: 0, pause: { _ in })
        let names = (0..<50).map { "d\($0)" }
        let mine = try #require(names.first { four.partition(ofSegment: $0) == 0 })
        let other = try #require(names.first { four.partition(ofSegment: $0) != 0 })
        let payload = JSONCoding.bytes(Item(seq: 1, epoch: "e", value: 5))
        host.receive(MQTTMessage(topic: "tracker/_p/0/\(other)/raw", payload: payload))
        host.receive(MQTTMessage(topic: "tracker/_p/0/\(mine)/raw", payload: payload))
        #expect(bus.messages.isEmpty)
        #expect(host.commit())
        let owner = four.partition(ofSegment: other)
        #expect(bus.messages.contains { $0.topic == "tracker/_p/\(owner)/\(other)/raw" && $0.payload == payload })
        #expect(bus.messages.contains { $0.topic.hasSuffix("/\(mine)/points") })
        #expect(!bus.messages.contains { $0.topic.hasSuffix("/\(other)/points") })
    }
}

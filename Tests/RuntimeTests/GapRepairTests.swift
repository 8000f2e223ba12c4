import Bus
import Foundation
import TrackerLog
import Model
@testable import Runtime
import Store
import TestSupport
import Testing

/// A producer of `points` (named as the filter, whose stream that is): each
/// `fixes` message `N` becomes point seq N in its outbox.
private func pointProducer() -> ServiceDefinition<Tally> {
    ServiceDefinition(name: "filter", migrations: [("points", DeviceLog.schema("points"))], rows: .json(fresh: { Tally() })) { db in
        let points = try DeviceLog(db: db, table: "points")
        return Routes(
            inputs: [.external("fixes", filter: \.allFixes) { message, work in
                let seq = Int64(String(decoding: message.payload, as: UTF8.self))!
                let point = TrackPoint(seq: seq, sessionID: nil, timeMs: seq * 1000, latitude: 48, longitude: 11, accuracyM: 5, odometerM: 0)
                try work.send(PointMessage(device: work.device, point: point, epoch: work.epoch), sessionID: nil, timeMs: point.timeMs)
            }],
            commands: [CommandRoute("getDecisions") { _, _ in 0 }, CommandRoute("getRawPoints") { _, _ in 0 }],
            outbox: OutboxRoute(log: points) { $0.points($1) },
            retention: [LogRetention(points, keepPerDevice: 1_000)],
            startOver: { _, _ in Tally() })  // a point's seq is its fix's
    }
}

/// A consumer of `points` (named as the uploader): it records the seqs it applied, in order.
private func pointConsumer() -> ServiceDefinition<Tally> {
    ServiceDefinition(name: "uploader", migrations: [], rows: .json(fresh: { Tally() })) { _ in
        Routes(
            inputs: [.sequenced("points", decode: { try JSONCoding.decoder.decode(PointMessage.self, from: Data($0)) }) { message, work in
                work.row.applied.append(message.seq)
            }],
            commands: [CommandRoute("configureSync", scope: .fleet) { _, _ in 0 }, CommandRoute("syncNow", scope: .fleet) { _, _ in 0 }])
    }
}

/// A producer and a consumer host on their own stores and buses, one manual
/// clock, and the test as the broker between them: it decides what arrives.
private final class RepairHarness {
    let clock = ManualClock()
    let producerBus = RecordingBus(), consumerBus = RecordingBus()
    let counters = HealthCounters()
    let producer: ServiceHost<Tally>
    let consumer: ServiceHost<Tally>
    private let databases = [TemporaryDatabase("repair-producer"), TemporaryDatabase("repair-consumer")]

    init(repair: RepairSettings = RepairSettings(retryMs: 3_000, timeoutMs: 30_000, tipGraceMs: 2_000), consumerCache: Int = 10_000) throws {
        let logger = Logger(label: "test", minimum: .off)
        producer = try ServiceHost(pointProducer(), databasePath: databases[0].path, bus: producerBus, topics: Topics(), logger: logger,
                                   counters: HealthCounters(), clock: clock, pause: { _ in }).runningParts()
        consumer = try ServiceHost(pointConsumer(), databasePath: databases[1].path, bus: consumerBus, topics: Topics(), logger: logger,
                                   counters: counters, clock: clock, cacheCapacity: consumerCache, repair: repair, pause: { _ in }).runningParts()
    }

    /// The producer sends points 1…n for `device`; returns them as published.
    func produce(_ device: String, _ seqs: ClosedRange<Int64>) -> [MQTTMessage] {
        producerBus.clear()
        for seq in seqs { producer.receive(MQTTMessage(topic: "tracker/\(device)/fixes", string: "\(seq)")) }
        #expect(producer.commit())
        return producerBus.messages(topicSuffix: "/points")
    }

    func deliver(_ messages: [MQTTMessage]) {
        messages.forEach(consumer.receive)
        #expect(consumer.commit())
    }

    func tick() {
        consumer.tick()
        #expect(consumer.commit())
    }

    var requests: [MQTTMessage] { consumerBus.messages.filter { $0.topic.contains("/cmd/repairPoints") } }

    /// The producer's health with `tips` for its points stream (this epoch unless told).
    func health(tips: [String: Int64], epoch: String? = nil) -> MQTTMessage {
        let health = Health(service: "filter", status: .online, version: "t", startedMs: 0, timeMs: 0,
                            streams: ["points": StreamTips(epoch: epoch ?? producer.epoch, tips: tips)])
        return MQTTMessage(topic: "tracker/_health/filter", payload: JSONCoding.bytes(health), retain: true)
    }

    /// The broker carries the newest request to the producer and its answer back.
    func answerNewestRequest() throws {
        let request = try #require(requests.last)
        producerBus.clear()
        producer.receive(request)
        #expect(producer.commit())
        let reply = try #require(producerBus.waitForMessage { $0.topic == request.responseTopic })
        deliver([reply])
    }

    func applied(_ device: String) throws -> [Int64] {
        consumer.close()
        let db = try Database(path: databases[1].path)
        let row = try #require(try db.first("SELECT row FROM host_devices WHERE device = ?", [.text(device)]) { $0.string(0) })
        return try JSONDecoder().decode(Tally.self, from: Data(row.utf8)).applied
    }

    /// Answers the newest request as a producer would, with `reply` made for its id.
    func answerNewestRequest(with reply: (JSONValue) throws -> CommandReply) throws {
        let request = try #require(requests.last)
        let id = try #require(try JSONDecoder().decode(CommandRequest.self, from: Data(request.payload)).id)
        deliver([MQTTMessage(topic: request.responseTopic!, payload: JSONCoding.bytes(try reply(id)))])
    }

    var gaps: [StreamGap] {
        consumerBus.events().compactMap { if case .streamGap(let gap) = $0.body { gap } else { nil } }
    }
}

@Suite struct GapRepairTests {
    @Test func aGapIsFilledFromTheProducersLogAndWhatCameAfterItWaits() throws {
        let h = try RepairHarness()
        let sent = h.produce("d", 1...10)
        #expect(sent.count == 10)
        // The broker forgets 4…7; 8, 9 and 10 arrive.
        h.deliver(Array(sent[0..<3]) + Array(sent[7...]))
        let request = try #require(h.requests.first)
        #expect(h.requests.count == 1, "one request for the gap, not one per message behind it")
        let args = try #require(try JSONDecoder().decode(CommandRequest.self, from: Data(request.payload)).args)
        #expect(try args.decode(RepairRequest.self) == RepairRequest(epoch: h.producer.epoch, after: 3, through: 7))
        try h.answerNewestRequest()
        #expect(h.gaps.isEmpty)
        #expect(try h.applied("d") == Array(1...10))
    }

    @Test func noGapNoRequest() throws {
        let h = try RepairHarness()
        h.deliver(h.produce("d", 1...50))
        h.clock.advance(by: .seconds(60))
        h.tick()
        #expect(h.requests.isEmpty)
        #expect(try h.applied("d") == Array(1...50))
    }

    @Test func whatTheProducerNoLongerHasIsReportedOnceAndSkipped() throws {
        let h = try RepairHarness()
        let sent = h.produce("d", 1...10)
        h.deliver(Array(sent[0..<3]) + Array(sent[7...]))
        // The producer answers with nothing: its log was trimmed past the range.
        try h.answerNewestRequest { .success(id: $0, try JSONValue(encoding: RepairAnswer(messages: [], more: false))) }
        #expect(h.gaps == [StreamGap(stream: "points", from: 4, to: 7, reason: .trimmed)])
        #expect(try h.applied("d") == [1, 2, 3, 8, 9, 10])
    }

    @Test func aProducerThatDoesNotAnswerIsAskedAgainThenTheGapIsReported() throws {
        let h = try RepairHarness()
        let sent = h.produce("d", 1...10)
        h.deliver(Array(sent[0..<3]) + Array(sent[7...]))
        h.clock.advance(by: .seconds(2))
        h.tick()
        #expect(h.requests.count == 1)
        h.clock.advance(by: .seconds(1))
        h.tick()
        #expect(h.requests.count == 2, "asked again after repairRetrySec")
        #expect(Set(h.requests.map(\.payload)).count == 1, "the same request: a late answer to the first still counts")
        h.clock.advance(by: .seconds(27))
        h.tick()
        #expect(h.gaps == [StreamGap(stream: "points", from: 4, to: 7, reason: .noAnswer)])
        #expect(try h.applied("d") == [1, 2, 3, 8, 9, 10])
    }

    @Test func aLostTailIsFoundFromTheProducersTipAfterTheGrace() throws {
        let h = try RepairHarness()
        let sent = h.produce("d", 1...10)
        h.deliver(Array(sent[0..<6]))
        let tips = Health(service: "filter", status: .online, version: "t", startedMs: 0, timeMs: 0,
                          streams: ["points": StreamTips(epoch: h.producer.epoch, tips: ["d": 10, "other": 0])])
        h.deliver([MQTTMessage(topic: "tracker/_health/filter", payload: JSONCoding.bytes(tips), retain: true)])
        h.tick()
        #expect(h.requests.isEmpty, "a tip may overtake its own messages: no request within the grace")
        h.clock.advance(by: .seconds(2))
        h.tick()
        try h.answerNewestRequest()
        #expect(h.gaps.isEmpty)
        #expect(try h.applied("d") == Array(1...10))
    }

    @Test func aTipOfAnotherEpochOrOneAlreadyReachedAsksNothing() throws {
        let h = try RepairHarness()
        h.deliver(h.produce("d", 1...10))
        for (epoch, tip) in [(h.producer.epoch, Int64(10)), ("an-old-store", 99)] {
            h.deliver([h.health(tips: ["d": tip], epoch: epoch)])
            h.clock.advance(by: .seconds(1))  // a producer's health is read once a second at most
        }
        h.clock.advance(by: .seconds(5))
        h.tick()
        #expect(h.requests.isEmpty)
    }

    @Test func aTipOfADeviceCommittedLatelyIsCheckedWithoutReadingItsRow() throws {
        // A cache of one device: it keeps the device it had (a) and drops b,
        // loaded after it and not used again, whose row is read back from the
        // store when it is next needed.
        let h = try RepairHarness(consumerCache: 1)
        h.deliver(h.produce("a", 1...4))
        h.deliver(h.produce("b", 1...4))
        let loads = h.counters.snapshot().extra["rowLoads"] ?? 0
        h.deliver([h.health(tips: ["a": 4, "b": 4])])
        #expect((h.counters.snapshot().extra["rowLoads"] ?? 0) == loads, "tips already reached read no row")
        h.clock.advance(by: .seconds(1))
        h.deliver([h.health(tips: ["b": 6])])
        #expect((h.counters.snapshot().extra["rowLoads"] ?? 0) == loads + 1, "a tip ahead of the mark committed lately reads the row")
        h.clock.advance(by: .seconds(2))
        h.tick()
        #expect(h.requests.count == 1, "and the lost tail is asked for")
    }

    @Test func aProducersHealthIsReadForTipsOnceASecondAtMost() throws {
        let h = try RepairHarness()
        h.deliver(Array(h.produce("d", 1...10).prefix(6)))
        h.deliver([h.health(tips: ["d": 6])])
        h.clock.advance(by: .milliseconds(500))
        h.deliver([h.health(tips: ["d": 10])])
        h.clock.advance(by: .seconds(3))
        h.tick()
        #expect(h.requests.isEmpty, "the second health came within the second: not read")
        h.deliver([h.health(tips: ["d": 10])])
        h.clock.advance(by: .seconds(2))
        h.tick()
        #expect(h.requests.count == 1)
        try h.answerNewestRequest()
        #expect(try h.applied("d") == Array(1...10))
    }

    @Test func aProducerWhoseStoreWasReplacedEndsTheRepairLoudly() throws {
        let h = try RepairHarness()
        let sent = h.produce("d", 1...10)
        h.deliver(Array(sent[0..<3]) + Array(sent[7...]))
        try h.answerNewestRequest { .failure(id: $0, CommandError(.notFound, "epoch: replaced")) }
        #expect(h.gaps == [StreamGap(stream: "points", from: 4, to: 7, reason: .producerReset)])
        #expect(try h.applied("d") == [1, 2, 3, 8, 9, 10])
    }

    @Test func aSecondGapAmongTheHeldMessagesIsRepairedInTurn() throws {
        let h = try RepairHarness()
        let sent = h.produce("d", 1...12)
        // Lost: 3…4 and 8…9.
        h.deliver(Array(sent[0..<2]) + Array(sent[4..<7]) + Array(sent[9...]))
        try h.answerNewestRequest()
        #expect(h.requests.count == 2)
        try h.answerNewestRequest()
        #expect(h.gaps.isEmpty)
        #expect(try h.applied("d") == Array(1...12))
    }

    @Test func theProducerAnswersARepairInPagesWithinItsReplyBound() throws {
        let h = try RepairHarness()
        let sent = h.produce("d", 1...6_000)
        h.deliver([sent[0], sent[5_999]])
        var rounds = 0
        while rounds < h.requests.count, rounds < 10 {
            try h.answerNewestRequest()
            rounds += 1
        }
        #expect(rounds == 2, "5,000 messages a page at most")
        #expect(try h.applied("d") == Array(1...6_000))
    }

    @Test func aStoreThatStartedEmptyBesideAProducerWithHistorySaysSoOnceAndRebuilds() throws {
        let h = try RepairHarness()
        let sent = h.produce("d", 1...40)
        // The consumer's store is new (deleted while it was stopped): the next point arrives at seq 31.
        h.deliver(Array(sent[30...]))
        h.deliver([])
        let said = h.consumerBus.events(topicSuffix: "_fleet/events")
        #expect(said.count == 1)
        if case .diagnostic(let code, let message)? = said.first?.body {
            #expect(code == "emptyStore" && message.contains("seq 31"), "\(message)")
        } else {
            Issue.record("no emptyStore diagnostic: \(said)")
        }
        #expect(h.counters.snapshot().note?.contains("started empty") == true)
        try h.answerNewestRequest()
        h.tick()
        #expect(h.counters.snapshot().note == nil, "the note goes once the rebuild is over")
        #expect(try h.applied("d") == Array(1...40))
    }

    @Test func theProducerRefusesARangeOfAnotherEpochOrUpsideDown() throws {
        let h = try RepairHarness()
        _ = h.produce("d", 1...3)
        for (args, code) in [(RepairRequest(epoch: "other", after: 0, through: 3), "notFound"),
                             (RepairRequest(epoch: h.producer.epoch, after: 3, through: 1), "badInput")] {
            let request = MQTTMessage(topic: "tracker/d/cmd/repairPoints", payload: JSONCoding.bytes(
                CommandRequest(id: .string("x"), args: try JSONValue(encoding: args))), responseTopic: "tracker/d/reply/x")
            h.producerBus.clear()
            h.producer.receive(request)
            #expect(h.producer.commit())
            let reply = try #require(h.producerBus.waitForMessage { $0.topic == "tracker/d/reply/x" })
            #expect(try JSONDecoder().decode(CommandReply.self, from: Data(reply.payload)).code == code)
        }
    }
}

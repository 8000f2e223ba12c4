import Bus
import Foundation
import TrackerLog
import Model
import Store
@testable import Runtime
import Synchronization
import TestSupport
import Testing
@testable import Uploader
import UploaderCore

/// Polls `condition` until it holds, within a bounded deadline.
private func waitUntil(_ what: @autoclosure () -> String = "condition", _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(10)
    while !condition() {
        guard ContinuousClock.now < deadline else { throw TestSupportError("\(what()) not met within 10 s") }
        await Task.yield()
    }
}

/// A transport that answers what the test scripted and keeps what it was sent.
final class ScriptedTransport: HTTPTransport, @unchecked Sendable {
    private let state = Mutex<(answers: [Exchange], sent: [UploadRequest])>(([], []))
    func script(_ answers: Exchange...) { state.withLock { $0.answers += answers } }
    var sent: [UploadRequest] { state.withLock { $0.sent } }
    func send(_ request: UploadRequest, timeoutMs: Int) -> Exchange {
        state.withLock { s in
            s.sent.append(request)
            return s.answers.isEmpty ? Exchange(failure: "nothing scripted") : s.answers.removeFirst()
        }
    }
}

/// The uploader on the host, its worker real, its HTTP scripted; `autoSync`
/// off so every attempt is the test's own `syncNow`.
@Suite(.serialized) struct UploaderHostTests {
    let bus = RecordingBus()
    let clock = ManualClock()
    let transport = ScriptedTransport()
    let database = TemporaryDatabase("up")

    func host() throws -> ServiceHost<UploaderService.Row> {
        try host(["syncNowTimeoutSec": .number(10)], transport: transport)
    }

    func host(_ settings: [String: JSONValue], transport: any HTTPTransport,
              counters: HealthCounters = HealthCounters()) throws -> ServiceHost<UploaderService.Row> {
        try .inProcess(UploaderService.definition(try UploaderSettings(.test(settings)), topics: Topics(), clock: clock,
                                                  logger: Logger(label: "test", minimum: .off), transport: transport),
                       path: database.path, bus: bus, clock: clock, counters: counters)
    }

    func point(_ seq: Int64, device: String = "van1", epoch: String = "f") -> MQTTMessage {
        let p = TrackPoint(seq: seq, sessionID: "s", timeMs: 1_800_000_000_000 + seq * 1000, latitude: 48.1, longitude: 11.5, accuracyM: 5, odometerM: 0)
        return MQTTMessage(topic: "tracker/\(device)/points", payload: JSONCoding.bytes(PointMessage(device: DeviceID(device)!, point: p, epoch: epoch)))
    }

    func command(_ uploader: ServiceHost<UploaderService.Row>, _ name: String, _ args: String = "{}") throws -> CommandReply {
        bus.clear()
        uploader.receive(MQTTMessage(topic: "tracker/_fleet/cmd/\(name)", string: #"{"id":"r","args":\#(args)}"#))
        #expect(uploader.commit())
        let message = try #require(bus.waitForMessage(timeout: .seconds(15)) { $0.topic == "tracker/_fleet/reply/\(name)" })
        return try JSONDecoder().decode(CommandReply.self, from: Data(message.payload))
    }

    func events() -> [String] {
        bus.events(topicSuffix: "tracker/_fleet/events").map(\.type)
    }

    @Test func everyAnswerDoesWhatItShould() throws {
        let uploader = try host()
        defer { uploader.close() }
        #expect(try command(uploader, "syncNow").code == "notReady")
        let configured = try command(uploader, "configureSync", #"{"url":"https://api.example.com/p","headers":{"Authorization":"Bearer s3cret"},"autoSync":false,"batchSize":3}"#)
        #expect(configured.ok && configured.result?["headers"]?["Authorization"]?.stringValue == "***")
        #expect(try command(uploader, "configureSync", #"{"batchSize":0}"#).code == "invalidConfig")
        for seq in Int64(1)...5 { uploader.receive(point(seq)) }
        uploader.receive(point(2))  // redelivered: queued once
        #expect(uploader.commit())

        transport.script(Exchange(statusCode: 500))
        #expect(try command(uploader, "syncNow").result?["outcome"]?.stringValue == "retry")
        #expect(events().contains("retryScheduled") && events().contains("httpResponse"))
        transport.script(Exchange(statusCode: 200), Exchange(statusCode: 200))
        #expect(try command(uploader, "syncNow").result == .object(["outcome": .string("uploaded"), "count": .number(3)]))
        #expect(try command(uploader, "syncNow").result?["count"] == .number(2))
        #expect(try command(uploader, "syncNow").result?["outcome"]?.stringValue == "empty")
        // The same first batch twice (the retry), then the rest: five points, each once delivered.
        let bodies = transport.sent.compactMap { $0.body }.map { try? JSONSerialization.jsonObject(with: Data($0)) as? [String: Any] }
        let seqs = bodies.compactMap { ($0?["points"] as? [[String: Any]])?.compactMap { $0["seq"] as? Int } }
        #expect(seqs == [[1, 2, 3], [1, 2, 3], [4, 5]])
        #expect(transport.sent[0].headers["Idempotency-Key"] == transport.sent[1].headers["Idempotency-Key"])
        #expect(transport.sent[0].headers["Authorization"] == "Bearer s3cret")

        // 401: stop, keep the queue, say so once; new credentials bring it back.
        for seq in Int64(6)...7 { uploader.receive(point(seq)) }
        #expect(uploader.commit())
        transport.script(Exchange(statusCode: 401))
        #expect(try command(uploader, "syncNow").result?["outcome"]?.stringValue == "authExpired")
        let sentBefore = transport.sent.count
        #expect(try command(uploader, "syncNow").result?["outcome"]?.stringValue == "authExpired")
        #expect(transport.sent.count == sentBefore)  // nothing sent while expired
        _ = try command(uploader, "configureSync", #"{"headers":{"Authorization":"Bearer new"}}"#)
        transport.script(Exchange(statusCode: 200))
        #expect(try command(uploader, "syncNow").result?["count"] == .number(2))
        #expect(transport.sent.last?.headers["Authorization"] == "Bearer new")

        // 429 with Retry-After: the wait it asks; 400: that batch set aside, the next flows.
        for seq in Int64(8)...13 { uploader.receive(point(seq)) }
        #expect(uploader.commit())
        transport.script(Exchange(statusCode: 429, retryAfter: "120"))
        #expect(try command(uploader, "syncNow").result?["reason"]?.stringValue == "HTTP 429, Retry-After 120")
        #expect(bus.messages.contains { $0.topic == "tracker/_fleet/events" && $0.string.contains(#""afterSec":120"#) })
        transport.script(Exchange(statusCode: 400), Exchange(statusCode: 200))
        #expect(try command(uploader, "syncNow").result?["count"] == .number(3))
        #expect(events().contains("diagnostic"))
        #expect(try command(uploader, "syncNow").result?["outcome"]?.stringValue == "empty")
    }

    @Test func theQueueSurvivesARestart() throws {
        do {
            let uploader = try host()
            _ = try command(uploader, "configureSync", #"{"url":"https://api.example.com/p","autoSync":false}"#)
            for seq in Int64(1)...4 { uploader.receive(point(seq)) }
            #expect(uploader.commit())
            uploader.close()
        }
        let restarted = try host()
        defer { restarted.close() }
        transport.script(Exchange(statusCode: 204))
        #expect(try command(restarted, "syncNow").result?["count"] == .number(4))
    }
}

extension UploaderHostTests {
    @Test func theQueueIsHeldToItsCapsLoudly() throws {
        let uploader = try host()
        defer { uploader.close() }
        _ = try command(uploader, "configureSync", #"{"url":"https://api.example.com/p","autoSync":false,"maxRecordsToPersist":100,"batchSize":500}"#)
        for seq in Int64(1)...150 { uploader.receive(point(seq)) }
        #expect(uploader.commit())
        // The worker looks at the queue as points arrive: over the cap, the oldest go, and it says so.
        let capped = bus.waitForMessage(timeout: .seconds(15)) { $0.string.contains("queueCapped") }
        #expect(capped?.string.contains("50 queued point") == true)
        transport.script(Exchange(statusCode: 200))
        #expect(try command(uploader, "syncNow").result?["count"] == .number(100))
        // The newest 100 were kept.
        let body = try JSONSerialization.jsonObject(with: Data(transport.sent.last?.body ?? [])) as? [String: Any]
        #expect((body?["points"] as? [[String: Any]])?.first?["seq"] as? Int == 51)
    }
}

extension UploaderHostTests {
    /// No server answering (refused, timed out) keeps the batch and backs off;
    /// a 401 with `stopTrackingOnAuthExpiry` asks the gateway to stop each device's session.
    @Test func noAnswerRetriesAndAuthExpiryCanStopTracking() throws {
        let uploader = try host()
        defer { uploader.close() }
        _ = try command(uploader, "configureSync", #"{"url":"https://api.example.com/p","autoSync":false,"stopTrackingOnAuthExpiry":true}"#)
        uploader.receive(point(1, device: "van1"))
        uploader.receive(point(1, device: "van2"))
        #expect(uploader.commit())
        transport.script(Exchange(failure: "connection refused"), Exchange(failure: "timed out"))
        let first = try command(uploader, "syncNow")
        #expect(first.result?["reason"]?.stringValue == "connection refused", "\(first)")
        #expect(bus.messages.contains { $0.string.contains("httpResponse") && !$0.string.contains("statusCode") })
        #expect(try command(uploader, "syncNow").result?["reason"]?.stringValue == "timed out")
        transport.script(Exchange(statusCode: 401))
        #expect(try command(uploader, "syncNow").result?["outcome"]?.stringValue == "authExpired")
        let stops = Set(bus.messages.filter { $0.topic.hasSuffix("/cmd/stop") }.map(\.topic))
        #expect(stops == ["tracker/van1/cmd/stop", "tracker/van2/cmd/stop"])
    }
}

extension UploaderHostTests {
    /// The real transport against the scripted sink: an answer, a stall past
    /// the timeout, a refused connection — each told apart, none a crash.
    @Test func theRealTransportTellsAnswersStallsAndRefusals() async throws {
        let sink = try HTTPSink(in: FileManager.default.temporaryDirectory, answers: ["429:7", "slow:3"])
        let transport = CurlTransport()
        let request = UploadRequest(method: "POST", url: "\(sink.url)/p", headers: ["Content-Type": "application/json"], body: Array("{}".utf8))
        #expect(await transport.send(request, timeoutMs: 2_000) == Exchange(statusCode: 429, retryAfter: "7"))
        let stalled = await transport.send(request, timeoutMs: 500)
        #expect(stalled.statusCode == nil && stalled.failure == "timed out", "\(stalled)")
        let refused = await transport.send(UploadRequest(method: "POST", url: "http://127.0.0.1:\(try freePort())/p", headers: [:], body: nil), timeoutMs: 2_000)
        #expect(refused.statusCode == nil && refused.failure == "connection refused", "\(refused)")
    }

    /// A 307 is followed with the same method and body, as URLSession did;
    /// the answer's headers are the last answer's (the 307's Retry-After is gone).
    @Test func theRealTransportFollowsARedirectWithItsBody() async throws {
        let sink = try HTTPSink(in: FileManager.default.temporaryDirectory, answers: ["redirect:/moved"])
        let request = UploadRequest(method: "POST", url: "\(sink.url)/p", headers: ["Content-Type": "application/json"], body: Array(#"{"n":1}"#.utf8))
        #expect(await CurlTransport().send(request, timeoutMs: 2_000) == Exchange(statusCode: 200))
        #expect(sink.lines == [#"{"n":1}"#])
    }

    /// Two exchanges with one server share a connection (keep-alive); a
    /// POST without a body says Content-Length: 0; the request says who
    /// sends it; a header with an empty value goes out empty.
    @Test func theRealTransportKeepsItsConnectionAndSaysWhatAServerExpects() async throws {
        let sink = try HTTPSink(in: FileManager.default.temporaryDirectory)
        let request = UploadRequest(method: "POST", url: "\(sink.url)/echo", headers: ["X-Empty": ""], body: nil)
        for _ in 0..<2 { #expect(await CurlTransport().send(request, timeoutMs: 2_000) == Exchange(statusCode: 200)) }
        let seen = try sink.lines.map { try JSONCoding.decoder.decode([String: JSONValue].self, from: Data($0.utf8)) }
        #expect(seen.count == 2)
        #expect(Set(seen.map { $0["port"] }).count == 1, "\(seen)")
        #expect(seen.allSatisfy { $0["contentLength"] == .string("0") && $0["userAgent"] == .string("Tracker") && $0["empty"] == .string("") }, "\(seen)")
    }

    /// A cancelled task's exchange ends as cancelled, not with the answer
    /// the stalling server would give after 5 s, well within the timeout.
    @Test func cancellingTheTaskEndsItsExchange() async throws {
        let sink = try HTTPSink(in: FileManager.default.temporaryDirectory, answers: ["slow:5"])
        let request = UploadRequest(method: "POST", url: "\(sink.url)/p", headers: [:], body: Array("{}".utf8))
        let exchange = Task { await CurlTransport().send(request, timeoutMs: 20_000) }
        exchange.cancel()
        let ended = await exchange.value
        #expect(ended.statusCode == nil && ended.failure == "cancelled", "\(ended)")
    }
}

extension UploaderHostTests {
    @Test func healthSaysHowOldTheOldestQueuedPointIs() throws {
        let counters = HealthCounters()
        let uploader = try host([:], transport: transport, counters: counters)
        defer { uploader.close() }
        _ = try command(uploader, "configureSync", #"{"url":"https://api.example.com/p","autoSync":false}"#)
        uploader.receive(point(1))
        #expect(uploader.commit())
        // An hour later (the point is from 1 s after the clock's start), the pass that syncNow makes measures the queue.
        clock.advance(by: .seconds(3_600))
        _ = try command(uploader, "syncNow")
        #expect(counters.snapshot().extra["oldestQueuedAgeMs"] == 3_599_000)
        #expect(counters.snapshot().queueDepth == 1)
    }
}

extension UploaderHostTests {
    /// OsmAnd to a real server: one request per point, its fields in the query, as Traccar reads them.
    @Test func osmandReachesARealServerOneRequestPerPoint() throws {
        let sink = try HTTPSink(in: FileManager.default.temporaryDirectory)
        let uploader = try host([:], transport: CurlTransport())
        defer { uploader.close() }
        _ = try command(uploader, "configureSync", #"{"url":"\#(sink.url)/","format":"osmand","autoSync":false}"#)
        for seq in Int64(1)...3 { uploader.receive(point(seq)) }
        #expect(uploader.commit())
        #expect(try command(uploader, "syncNow").result?["count"] == .number(3))
        let lines = sink.lines
        #expect(lines.count == 3)
        let query = lines.first.flatMap { URLComponents(string: "http://x\($0)")?.queryItems } ?? []
        let fields = Dictionary(query.map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { a, _ in a })
        // Milliseconds, as Traccar reads a timestamp past 2^31.
        #expect(fields["id"] == "van1" && fields["timestamp"] == "1800000001000" && fields["lat"] == "48.1000000" && fields["lon"] == "11.5000000")
    }
}

extension UploaderHostTests {
    /// The config file's `sync`: refused by name when wrong; at start it
    /// replaces a different config in force, which ends an auth expiry — an
    /// unchanged file does not.
    @Test func aRestartWithANewConfigEndsAnAuthExpiry() throws {
        #expect(throws: ConfigError.self) { try UploaderSettings(SettingsReader(values: ["sync": .object(["url": .string("ftp://x")])], source: "test")) }
        func host(headers: String) throws -> ServiceHost<UploaderService.Row> {
            let sync = JSONValue.object(["url": .string("https://api.example.com/p"), "autoSync": .bool(false),
                                         "headers": .object(["Authorization": .string(headers)])])
            return try self.host(["sync": sync], transport: transport)
        }
        var uploader = try host(headers: "Bearer old")
        uploader.receive(point(1))
        #expect(uploader.commit())
        transport.script(Exchange(statusCode: 401))
        #expect(try command(uploader, "syncNow").result?["outcome"]?.stringValue == "authExpired")
        uploader.close()
        uploader = try host(headers: "Bearer old")  // the same file: still expired
        #expect(try command(uploader, "syncNow").result?["outcome"]?.stringValue == "authExpired")
        uploader.close()
        uploader = try host(headers: "Bearer new")  // new credentials in the file
        defer { uploader.close() }
        transport.script(Exchange(statusCode: 200))
        #expect(try command(uploader, "syncNow").result?["count"] == .number(1))
        #expect(transport.sent.last?.headers["Authorization"] == "Bearer new")
    }
}

extension UploaderHostTests {
    /// A batch is fixed once formed: the retry of a failed attempt sends the
    /// same points under the same key, though more were queued meanwhile.
    @Test func aRetrySendsTheSameBatchUnderTheSameKey() throws {
        let uploader = try host()
        defer { uploader.close() }
        _ = try command(uploader, "configureSync", #"{"url":"https://api.example.com/p","autoSync":false,"batchSize":3}"#)
        for seq in Int64(1)...2 { uploader.receive(point(seq)) }
        #expect(uploader.commit())
        transport.script(Exchange(statusCode: 503))
        #expect(try command(uploader, "syncNow").result?["outcome"]?.stringValue == "retry")
        for seq in Int64(3)...4 { uploader.receive(point(seq)) }
        #expect(uploader.commit())
        transport.script(Exchange(statusCode: 200), Exchange(statusCode: 200))
        #expect(try command(uploader, "syncNow").result?["count"] == .number(2))
        #expect(try command(uploader, "syncNow").result?["count"] == .number(2))
        func seqs(_ request: UploadRequest) -> [Int] {
            let body = try? JSONSerialization.jsonObject(with: Data(request.body ?? [])) as? [String: Any]
            return (body?["points"] as? [[String: Any]])?.compactMap { $0["seq"] as? Int } ?? []
        }
        let sent = transport.sent
        #expect(sent.map(seqs) == [[1, 2], [1, 2], [3, 4]])
        #expect(sent[0].headers["Idempotency-Key"] == sent[1].headers["Idempotency-Key"])
        #expect(sent[1].headers["Idempotency-Key"] != sent[2].headers["Idempotency-Key"])
    }

    /// The age cap counts from when a point was queued: a replayed recording
    /// a year old is forwarded, and a point that waits too long goes, loudly.
    @Test func theAgeCapCountsFromWhenAPointWasQueued() throws {
        let uploader = try host()
        defer { uploader.close() }
        _ = try command(uploader, "configureSync", #"{"url":"https://api.example.com/p","autoSync":false,"maxDaysToPersist":1}"#)
        let yearOld = TrackPoint(seq: 1, sessionID: "s", timeMs: clock.nowMs() - 365 * 86_400_000, latitude: 48.1, longitude: 11.5,
                                 accuracyM: 5, odometerM: 0)
        uploader.receive(MQTTMessage(topic: "tracker/van1/points", payload: JSONCoding.bytes(PointMessage(device: DeviceID("van1")!, point: yearOld, epoch: "f"))))
        uploader.receive(point(2))
        #expect(uploader.commit())
        transport.script(Exchange(statusCode: 200))
        #expect(try command(uploader, "syncNow").result?["count"] == .number(2))
        #expect(!bus.messages.contains { $0.string.contains("queueCapped") })
        uploader.receive(point(3))
        #expect(uploader.commit())
        clock.advance(by: .seconds(2 * 86_400))
        #expect(try command(uploader, "syncNow").result?["outcome"]?.stringValue == "empty")
        let capped = bus.messages.first { $0.string.contains("queueCapped") }
        #expect(capped?.string.contains("1 queued point") == true)
    }
}

extension UploaderHostTests {
    /// A queue written by the release before (no batch, no queued time)
    /// comes through the migration: its points go out, none dropped for age.
    @Test func aQueueFromTheReleaseBeforeIsForwarded() throws {
        do {
            let db = try Database(path: database.path)
            var before = Migrator()
            for (name, sql) in HostStore.migrations + UploaderStore.migrations.prefix(1) { before.register(name, sql) }
            try before.migrate(db)
            let old = TrackPoint(seq: 1, sessionID: "s", timeMs: 1_500_000_000_000, latitude: 48.1, longitude: 11.5, accuracyM: 5, odometerM: 0)
            try db.run("INSERT INTO queue (device, epoch, seq, timeMs, body) VALUES (?, ?, ?, ?, ?)",
                       [.text("van1"), .text("f"), .integer(1), .integer(old.timeMs), .utf8(JSONCoding.bytes(old))])
        }
        let uploader = try host()
        defer { uploader.close() }
        _ = try command(uploader, "configureSync", #"{"url":"https://api.example.com/p","autoSync":false,"maxDaysToPersist":1}"#)
        transport.script(Exchange(statusCode: 200))
        #expect(try command(uploader, "syncNow").result?["count"] == .number(1))
        #expect(transport.sent.last?.headers["Idempotency-Key"]?.hasPrefix("batch-") == true)
    }
}

/// `syncNow` for a partitioned uploader: each partition's outcome, made one.
@Suite struct SyncOutcomeAcrossPartitionsTests {
    func merged(_ outcomes: [SyncOutcome]) throws -> JSONValue? {
        guard case .combine(let combine) = SyncOutcome.acrossPartitions else { return nil }
        return combine(try outcomes.map { try JSONCoding.decoder.decode(JSONValue.self, from: JSONCoding.encode($0)) })
    }

    @Test func uploadsAreSummedAndWhatNeedsTheOperatorComesFirst() throws {
        #expect(try merged([.uploaded(3), .empty, .uploaded(4)]) == .object(["outcome": .string("uploaded"), "count": .number(7)]))
        #expect(try merged([.empty, .empty]) == .object(["outcome": .string("empty")]))
        #expect(try merged([.uploaded(3), .retry("HTTP 503"), .empty]) == .object(["outcome": .string("retry"), "reason": .string("HTTP 503")]))
        #expect(try merged([.retry("HTTP 503"), .authExpired]) == .object(["outcome": .string("authExpired")]))
    }
}

/// The partitions of one instance send one request at a time, in the order they asked.
@Suite struct UploadTurnsTests {
    final class Worker: Sendable {}
    let a = Worker(), b = Worker(), c = Worker()

    func take(_ turns: UploadTurns, _ worker: Worker, noting name: String, in order: Order) async -> Bool {
        guard await turns.begin(ObjectIdentifier(worker), unless: { false }) else { order.note("\(name) withdrawn"); return false }
        order.note(name)
        turns.end()
        return true
    }

    @Test func aTurnWaitsUntilTheOneBeforeEndsAndThenPassesInOrder() async throws {
        let turns = UploadTurns()
        #expect(await turns.begin(ObjectIdentifier(a), unless: { false }))
        let order = Order()
        let first = Task { [b] in await take(turns, b, noting: "first", in: order) }
        try await waitUntil { turns.waitingCount == 1 }
        let second = Task { [c] in await take(turns, c, noting: "second", in: order) }
        try await waitUntil { turns.waitingCount == 2 }
        #expect(order.names.isEmpty)  // both wait while the turn is taken
        turns.end()
        let (firstWent, secondWent) = (await first.value, await second.value)
        #expect(firstWent && secondWent)
        #expect(order.names == ["first", "second"])
        // Free again: the next caller goes at once.
        #expect(await turns.begin(ObjectIdentifier(a), unless: { false }))
        turns.end()
        #expect(turns.waitingCount == 0)
    }

    /// A stopping worker does not wait for the others' requests: taken out
    /// of the line, or refused a turn once it is stopping, it sends nothing.
    @Test func aStoppingWorkerLeavesTheLineAtOnce() async throws {
        let turns = UploadTurns()
        #expect(await turns.begin(ObjectIdentifier(a), unless: { false }))
        let order = Order()
        let waiting = Task { [b] in await take(turns, b, noting: "b", in: order) }
        try await waitUntil { turns.waitingCount == 1 }
        turns.withdraw(ObjectIdentifier(b))
        #expect(await waiting.value == false)
        #expect(order.names == ["b withdrawn"])
        #expect(await turns.begin(ObjectIdentifier(c), unless: { true }) == false)  // stopping: no turn, no wait
        turns.end()
        #expect(turns.waitingCount == 0)
    }

    final class Order: Sendable {
        private let state = Mutex<[String]>([])
        func note(_ name: String) { state.withLock { $0.append(name) } }
        var names: [String] { state.withLock { $0 } }
    }
}

extension UploaderHostTests {
    /// The count of points waiting is kept as they are queued, delivered and
    /// set aside (counting is a scan of the queue, which a pass must not
    /// make), and counted again within a minute, so nothing drifts for long.
    @Test func theWaitingCountFollowsThePointsAndIsRecountedEveryMinute() throws {
        let counters = HealthCounters()
        let uploader = try host([:], transport: transport, counters: counters)
        defer { uploader.close() }
        _ = try command(uploader, "configureSync", #"{"url":"https://api.example.com/p","autoSync":false,"batchSize":3}"#)
        for seq in Int64(1)...7 { uploader.receive(point(seq)) }
        #expect(uploader.commit())
        transport.script(Exchange(statusCode: 200))
        #expect(try command(uploader, "syncNow").result?["count"] == .number(3))
        #expect(counters.snapshot().queueDepth == 4)
        transport.script(Exchange(statusCode: 400), Exchange(statusCode: 200))  // the next 3 set aside, then the last delivered
        #expect(try command(uploader, "syncNow").result?["count"] == .number(1))
        #expect(counters.snapshot().queueDepth == 0)

        // Points that reach the queue some other way (a restored backup, say) are found at the next count.
        let other = try Database(path: database.path)
        try other.run("UPDATE queue SET parked = 0")
        _ = try command(uploader, "syncNow")
        #expect(counters.snapshot().queueDepth == 0)  // a pass does not count the queue
        clock.advance(by: .seconds(61))
        transport.script(Exchange(statusCode: 500))
        _ = try command(uploader, "syncNow")
        #expect(counters.snapshot().queueDepth == 3)
    }
}

extension UploaderHostTests {
    /// Points that come soon after a request wait `coalesceMs` for the next
    /// one, together; a whole batch goes at once, also one that fills while
    /// its first points wait.
    @Test func pointsThatComeCloseTogetherShareARequest() async throws {
        let counters = HealthCounters()
        let uploader = try host(["syncNowTimeoutSec": .number(10)], transport: transport, counters: counters)
        defer { uploader.close() }
        // A minute: while the clock stands, only a whole batch ends the wait.
        _ = try command(uploader, "configureSync", #"{"url":"https://api.example.com/p","coalesceMs":60000,"batchSize":4}"#)
        func sentSeqs() -> [[Int]] {
            transport.sent.map { request in
                let body = try? JSONSerialization.jsonObject(with: Data(request.body ?? [])) as? [String: Any]
                return ((body?["points"] as? [[String: Any]]) ?? []).compactMap { $0["seq"] as? Int }
            }
        }
        // Each pass says how old the oldest waiting point is (nothing when none waits): that tells a pass ran.
        func passSawPointsWaiting() -> Bool { counters.snapshot().extra["oldestQueuedAgeMs"] != nil }
        func held() -> Int64 { counters.snapshot().extra["coalesced"] ?? 0 }
        func queue(_ seqs: ClosedRange<Int64>) {
            for seq in seqs { uploader.receive(point(seq)) }
            #expect(uploader.commit())
        }
        transport.script(Exchange(statusCode: 200), Exchange(statusCode: 200), Exchange(statusCode: 200), Exchange(statusCode: 200))
        queue(1...1)
        // Delivered (the event comes after the request ended), and the pass after it found nothing waiting.
        try await waitUntil("first request and a pass after it; sent \(sentSeqs())") { events().contains("uploaded") && !passSawPointsWaiting() }
        queue(2...2)
        // Point 2's pass either sends it (a second request) or holds it back for more.
        try await waitUntil("pass for point 2; sent \(sentSeqs())") { transport.sent.count == 2 || held() >= 1 }
        queue(3...3)
        clock.advance(by: .seconds(60))
        try await waitUntil("second request; sent \(sentSeqs())") { transport.sent.count == 2 }
        queue(4...7)
        try await waitUntil("third request; sent \(sentSeqs())") { transport.sent.count == 3 }  // a whole batch: no wait, though the clock stands
        let before = held()
        queue(8...8)
        try await waitUntil("pass for point 8; sent \(sentSeqs())") { transport.sent.count == 4 || held() > before }
        queue(9...11)
        try await waitUntil("fourth request; sent \(sentSeqs())") { transport.sent.count == 4 }  // filled while it waited
        #expect(sentSeqs() == [[1], [2, 3], [4, 5, 6, 7], [8, 9, 10, 11]])
    }
}

extension UploaderHostTests {
    /// The host notes a point once its batch is committed, and the worker
    /// counts the queue on its own thread: a point committed before a count
    /// and noted after it is counted once. (Counted by a mark of the notes,
    /// it was taken in twice: the queue's depth read 11 where 4 waited.)
    @Test func aPointCountedBeforeItsNoteArrivesIsCountedOnce() async throws {
        try host().close()  // the store, as the service makes it
        let store = UploaderStore(db: try Database(path: database.path))
        func queue(_ seq: Int64) throws -> Int64 {
            let message = try JSONCoding.decoder.decode(PointMessage.self, from: Data(point(seq).payload))
            return try #require(try store.enqueue(message, nowMs: clock.nowMs()))
        }
        let early = try (1...3).map(queue)  // committed, their notes still to come
        let counters = HealthCounters()
        let worker = UploadWorker(path: database.path, topics: Topics(), transport: transport, turns: UploadTurns(), clock: clock,
                                  logger: Logger(label: "test", minimum: .off), bus: bus, counters: counters)
        let running = Task { try await worker.run() }
        defer { worker.stop() }
        #expect(await worker.syncNow(timeout: .seconds(10)) == .notConfigured)  // a pass, nothing sent
        #expect(counters.snapshot().queueDepth == 3)
        for id in early { worker.noteQueued(id: id) }
        #expect(counters.snapshot().queueDepth == 3)
        // Committed after the count, noted before the next: counted once too.
        let late = try queue(4)
        worker.noteQueued(id: late)
        #expect(counters.snapshot().queueDepth == 4)
        clock.advance(by: .seconds(61))
        #expect(await worker.syncNow(timeout: .seconds(10)) == .notConfigured)  // the minute's count
        #expect(counters.snapshot().queueDepth == 4)
        worker.stop()
        try await running.value
    }
}

extension UploaderHostTests {
    /// The uploader's row is stored in the binary form; one an earlier
    /// release stored as JSON (`{}`, as text) still loads, and is written back binary.
    @Test func itsRowIsStoredBinaryAndAJSONRowStillLoads() throws {
        func storedRow() throws -> (type: String, bytes: [UInt8])? {
            let db = try Database(path: database.path)
            return try db.first("SELECT typeof(row), row FROM host_devices WHERE device = 'van1'") { ($0.string(0), Array($0.data(1))) }
        }
        do {
            let uploader = try host()
            _ = try command(uploader, "configureSync", #"{"url":"https://api.example.com/p","autoSync":false}"#)
            uploader.receive(point(1))
            #expect(uploader.commit())
            uploader.close()
        }
        #expect(try storedRow()?.type == "blob")
        #expect(try storedRow()?.bytes == [0xF1, 1])
        try Database(path: database.path).run("UPDATE host_devices SET row = '{}' WHERE device = 'van1'")
        #expect(try storedRow()?.type == "text")

        let restarted = try host()
        defer { restarted.close() }
        restarted.receive(point(2))
        #expect(restarted.commit())
        #expect(try storedRow()?.type == "blob")
        transport.script(Exchange(statusCode: 204))
        #expect(try command(restarted, "syncNow").result?["count"] == .number(2))
    }
}

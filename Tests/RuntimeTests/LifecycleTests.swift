import Bus
import Foundation
import Model
@testable import Runtime
import Store
import Synchronization
import TestSupport
import Testing
import TrackerLog

/// A part that records when it starts, is asked to stop and returns.
final class RecordingPart: LongRunning {
    let name: String
    let journal: Journal
    let failsWith: String?
    private let stopping = StopRequest()

    init(_ name: String, _ journal: Journal, failsWith: String? = nil) { self.name = name; self.journal = journal; self.failsWith = failsWith }

    struct Failure: Error, CustomStringConvertible { let description: String }

    func run() async throws {
        journal.note("\(name) runs")
        if let failsWith { throw Failure(description: failsWith) }
        await stopping.wait()
        journal.note("\(name) returns")
    }

    func stop() {
        journal.note("\(name) stops")
        stopping.request()
    }
}

final class Journal: Sendable {
    private let entries = Mutex<[String]>([])
    func note(_ entry: String) { entries.withLock { $0.append(entry) } }
    var all: [String] { entries.withLock { $0 } }
}

@Suite struct LifecycleTests {
    let logger = Logger(label: "test", minimum: .off)

    @Test func aSignalStopsThePartsInReverseOrderEachAfterTheOneAfterItReturned() async {
        let journal = Journal()
        let signal = StopRequest()
        let names = ["output", "queries", "input", "health"]
        let lifecycle = Lifecycle(names.map { Lifecycle.Part($0, RecordingPart($0, journal)) }, logger: logger) {
            await signal.wait()
            return SIGTERM
        }
        async let ending = lifecycle.run()
        // Every part is running before the signal comes.
        while journal.all.filter({ $0.hasSuffix(" runs") }).count < names.count { await Task.yield() }
        signal.request()
        #expect(await ending == .signal(SIGTERM))
        let stops = journal.all.filter { !$0.hasSuffix(" runs") }
        #expect(stops == names.reversed().flatMap { ["\($0) stops", "\($0) returns"] })
    }

    @Test func aPartThatEndsByItselfStopsTheOthersAndSaysWhich() async {
        let journal = Journal()
        let parts = [Lifecycle.Part("output", RecordingPart("output", journal)),
                     Lifecycle.Part("worker", RecordingPart("worker", journal, failsWith: "the queue cannot be opened"), blocking: true),
                     Lifecycle.Part("input", RecordingPart("input", journal))]
        // No signal ever comes: the failing part alone must end the run.
        let ending = await Lifecycle(parts, logger: logger) { await StopRequest().wait(); return SIGTERM }.run()
        #expect(ending == .partEnded("worker", error: "the queue cannot be opened"))
        #expect(journal.all.contains("input returns") && journal.all.contains("output returns"))
        let order = journal.all.filter { $0.hasSuffix(" returns") }
        #expect(order == ["input returns", "output returns"])
    }

    @Test func aConnectionStoppedBeforeItEverConnectedEndsItsThread() async throws {
        // Nothing listens on this port: the client keeps trying until the part is stopped.
        let client = try MQTTClient(MQTTOptions(port: try freePort(), clientID: "lifecycle-test"))
        let part = ConnectionPart(client, subscribing: ["a/b"], logger: logger)
        async let ran: Void = part.run()
        while !client.isRunning { await Task.yield() }
        part.stop()
        try await ran
        #expect(!client.isRunning)
    }

    @Test func aConnectionThatStopsHasItsThreadEndedAndItsFarewellDelivered() async throws {
        let broker = try TestBroker()
        let client = try MQTTClient(MQTTOptions(port: broker.port, clientID: "lifecycle-out"))
        let watcher = try await MessageCollector(port: broker.port, filters: ["farewell/#"])
        let part = ConnectionPart(client, farewell: { MQTTMessage(topic: "farewell/x", string: "bye") }, logger: logger)
        async let ran: Void = part.run()
        try await client.connect(timeout: .seconds(5))
        part.stop()
        try await ran
        #expect(!client.isRunning)
        try await watcher.wait(timeout: 5, description: "the farewell") { $0.contains { $0.topic == "farewell/x" } }
        await watcher.close()
    }
}

@Suite struct WaitingCommandTests {
    /// A service whose `getDecisions` waits until the test releases it and
    /// whose `getRawPoints` is a plain read, both answered by the query worker.
    func service(_ release: StopRequest) -> ServiceDefinition<Tally> {
        // Named after the filter, whose catalogue it answers (repairPoints comes with the outbox).
        ServiceDefinition(name: "filter", migrations: [("items", DeviceLog.schema("items"))], rows: .json(fresh: { Tally() })) { db in
            Routes(inputs: [], commands: [
                .waiting("getDecisions") { _ in
                    await release.wait()
                    return .value("released")
                },
                .query("getRawPoints") { _, _ in .value("read") },
            ], outbox: OutboxRoute(log: try DeviceLog(db: db, table: "items")) { "\($0.prefix)/\($1)/points" },
            startOver: { _, _ in Tally() })
        }
    }

    @Test func aCommandThatWaitsHoldsUpNoQuery() throws {
        let database = TemporaryDatabase("waiting")
        let bus = RecordingBus()
        let release = StopRequest()
        let host = try ServiceHost(service(release), databasePath: database.path, bus: bus, topics: Topics(),
                                   logger: Logger(label: "test", minimum: .off), counters: HealthCounters()).runningParts()
        defer { release.request(); host.close() }
        host.receive(MQTTMessage(topic: "tracker/van1/cmd/getDecisions", string: #"{"id":"w"}"#))
        host.receive(MQTTMessage(topic: "tracker/van1/cmd/getRawPoints", string: #"{"id":"r"}"#))
        #expect(host.commit())
        // The read is answered while the other still waits: nothing else can release it.
        let read = bus.waitForMessage { $0.topic == "tracker/van1/reply/getRawPoints" }
        #expect(read?.string.contains(#""result":"read""#) == true)
        #expect(!bus.messages.contains { $0.topic == "tracker/van1/reply/getDecisions" })
        release.request()
        let waited = bus.waitForMessage { $0.topic == "tracker/van1/reply/getDecisions" }
        #expect(waited?.string.contains(#""result":"released""#) == true)
    }
}

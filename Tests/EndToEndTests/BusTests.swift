import Bus
import Foundation
import Model
import Synchronization
import TestSupport
import Testing

/// The bus against a real mosquitto: acknowledgements that survive reconnects.
@Suite(.serialized) struct BusTests {
    final class Tally: Sendable {
        let state = Mutex<(ok: Int, failed: Int)>((0, 0))
        func record(_ result: Result<Void, MQTTError>) {
            state.withLock { if case .success = result { $0.ok += 1 } else { $0.failed += 1 } }
        }
        var ok: Int { state.withLock { $0.ok } }
        var failed: Int { state.withLock { $0.failed } }
    }

    func client(_ broker: TestBroker, id: String) async throws -> MQTTClient {
        let client = try MQTTClient(MQTTOptions(port: broker.port, clientID: id, cleanStart: false, sessionExpirySec: 600))
        try await client.connect()
        return client
    }

    /// The benches and tests measure the broker users run: every setting of
    /// config/mosquitto.conf but its listener (on a free port here), the
    /// save every second included (it costs a large fleet about 8 %).
    @Test func aPersistentTestBrokerRunsTheProductsSettings() throws {
        let broker = try TestBroker(persistent: true)
        let product = try String(contentsOf: Repository.root.appendingPathComponent("config/mosquitto.conf"), encoding: .utf8)
        let used = try String(contentsOf: broker.directory.appendingPathComponent("mosquitto.conf"), encoding: .utf8)
        let usedLines = Set(used.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) })
        let settings = product.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") && !$0.hasPrefix("listener ") }
        #expect(settings.contains("autosave_interval 1"))
        for setting in settings { #expect(usedLines.contains(setting), "the test broker lacks '\(setting)'") }
    }

    @Test func everyAcknowledgementArrivesAcrossABrokerRestart() async throws {
        let broker = try TestBroker(persistent: true)
        let publisher = try await client(broker, id: "bus-restart")
        let tally = Tally()
        for i in 0..<3_000 {
            try publisher.publish(MQTTMessage(topic: "bench/restart", string: "\(i)"), acknowledged: tally.record)
            // Halfway, the broker goes away and comes back: the rest is published while
            // disconnected or reconnecting, and what was in flight is in doubt.
            if i == 1_500 { try broker.restart() }
        }
        await publisher.drain(timeout: .seconds(30))
        #expect(tally.ok == 3_000 && tally.failed == 0)
        #expect(publisher.inFlight == 0)
        await publisher.disconnect()
    }

    @Test func moreThanSixtyFiveThousandOutstandingNeverShareAMessageID() async throws {
        let broker = try TestBroker()
        let publisher = try await client(broker, id: "bus-window")
        let tally = Tally()
        let count = 70_000
        // While the broker is away nothing is acknowledged: all 70,000 are outstanding at once.
        broker.stop()
        for i in 0..<count { try publisher.publish(MQTTMessage(topic: "bench/window", string: "\(i)"), acknowledged: tally.record) }
        try broker.start()
        await publisher.drain(timeout: .seconds(60))
        // With ids reused while their closures waited, some closures were overwritten and never ran.
        #expect(tally.ok == count && tally.failed == 0)
        #expect(publisher.inFlight == 0)
        await publisher.disconnect()
    }

    /// A windowed publisher never has more than its limit unacknowledged:
    /// with the broker away it stops at the limit, and goes on once the
    /// acknowledgements come, losing nothing.
    @Test func aWindowedPublisherWaitsForRoom() async throws {
        let broker = try TestBroker()
        let publisher = try await client(broker, id: "bus-room")
        let tally = Tally()
        let most = Mutex(0)
        broker.stop()
        let sending = Task {
            for i in 0..<300 {
                try await publisher.publish(inFlightBelow: 100, MQTTMessage(topic: "bench/room", string: "\(i)"))
                let now = publisher.inFlight
                most.withLock { $0 = max($0, now) }
                tally.record(.success(()))
            }
        }
        let deadline = ContinuousClock.now + .seconds(10)
        while tally.ok < 100, ContinuousClock.now < deadline { await Task.yield() }
        #expect(tally.ok == 100 && publisher.inFlight == 100)
        try broker.start()
        try await sending.value
        await publisher.drain(timeout: .seconds(30))
        #expect(tally.ok == 300 && publisher.inFlight == 0)
        #expect(most.withLock { $0 } <= 100)
        await publisher.disconnect()
    }

    /// The loop calls its hooks once per pass, for the life of the process.
    /// They were once kept as bare closures in a Mutex, and every read
    /// rewrapped the stored closure: the stack under the commit hook grew
    /// by two frames a pass (thousands deep after seconds; a crash after a
    /// day). The depth under the hook must stay as it was at the start.
    @Test func theHooksDoNotGrowWithEveryLoopPass() async throws {
        let broker = try TestBroker()
        let depths = Mutex<[Int]>([])
        let subscriber = try MQTTClient(MQTTOptions(port: broker.port, clientID: "bus-hooks", cleanStart: true))
        subscriber.setHandler { _ in }
        subscriber.setBeforeAcknowledging {
            depths.withLock { $0.append(Thread.callStackReturnAddresses.count) }
            return true
        }
        try await subscriber.connect()
        try await subscriber.subscribe(["bench/hooks"])
        let publisher = try await client(broker, id: "bus-hooks-pub")
        for i in 0..<2_000 { try await publisher.publishAndWait(MQTTMessage(topic: "bench/hooks", string: "\(i)")) }
        let seen = depths.withLock { $0 }
        #expect(seen.count > 100, "only \(seen.count) passes")  // a pass may read many messages; the bug grew 2 frames a pass
        #expect((seen.max() ?? 0) - (seen.min() ?? 0) < 8, "stack under the hook grew from \(seen.min() ?? 0) to \(seen.max() ?? 0) frames")
        await publisher.disconnect()
        await subscriber.disconnect()
    }

    /// Polls `condition` until it holds or 10 s pass.
    func eventually(_ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition(), ContinuousClock.now < deadline { await Task.yield() }
        return condition()
    }

    /// What a periodic call leaves runs in slices after it, until the slice
    /// says nothing is left, and not at all while reading is held.
    @Test func aPeriodicCallsFollowUpRunsUntilItIsDoneAndWaitsWhileReadingIsHeld() async throws {
        struct Loop { var reading = true, gateSaid = true, armed = false, armedAt = 0, ticks = 0, left = 0, slices = 0, whileHeld = 0 }
        let broker = try TestBroker()
        let loop = Mutex(Loop())
        let received = Mutex(0)
        let looping = try MQTTClient(MQTTOptions(port: broker.port, clientID: "bus-follow-up", cleanStart: true))
        looping.setHandler { _ in received.withLock { $0 += 1 } }
        looping.setReadGate { loop.withLock { $0.gateSaid = $0.reading; return $0.reading } }
        // The call after arming leaves five slices; every other call nothing.
        looping.setPeriodic(every: .milliseconds(20)) {
            loop.withLock { l in
                l.ticks += 1
                if l.armed { (l.armed, l.armedAt, l.left, l.slices) = (false, l.ticks, 5, 0) }
            }
        }
        looping.setFollowUp(every: .milliseconds(2)) {
            loop.withLock { l in
                l.slices += 1
                if !l.gateSaid { l.whileHeld += 1 }
                l.left -= 1
                return l.left > 0
            }
        }
        try await looping.connect()
        try await looping.subscribe(["bench/follow-up"])
        loop.withLock { $0.reading = false; $0.armed = true }
        // Three calls (60 ms, thirty follow-up intervals) with reading held: no slice ran.
        #expect(await eventually { loop.withLock { !$0.armed && $0.ticks >= $0.armedAt + 3 } })
        #expect(loop.withLock { $0.slices } == 0)
        loop.withLock { $0.reading = true }
        #expect(await eventually { loop.withLock { $0.slices >= 5 } })
        // Passes that read after it: the follow-up said it was done, and ran once more a call at most.
        let publisher = try await client(broker, id: "bus-follow-up-pub")
        for i in 0..<50 { try await publisher.publishAndWait(MQTTMessage(topic: "bench/follow-up", string: "\(i)")) }
        #expect(await eventually { received.withLock { $0 } == 50 })
        let l = loop.withLock { $0 }
        #expect(l.slices <= 5 + (l.ticks - l.armedAt), "\(l.slices) slices over \(l.ticks - l.armedAt) calls")
        #expect(l.whileHeld == 0)
        await publisher.disconnect()
        await looping.disconnect()
    }
}

import Bus
import Foundation
import TrackerLog
import Model
@testable import Runtime
import Synchronization
import TestSupport
import Testing

/// A large sweep is looked at a slice at a time, between passes that read:
/// a fleet fallen silent at once must not hold up the fixes arriving
/// meanwhile, nor reach the services after this one in one burst.
@Suite struct SweepSliceTests {
    /// The devices the sweep finds due, and how many messages each one's sweep publishes.
    final class Due: Sendable {
        let state = Mutex<(devices: [DeviceID], messages: Int, failing: String?)>(([], 1, nil))
        /// `failing`'s sweep throws, once.
        func set(_ devices: [String], messages: Int = 1, failing: String? = nil) {
            state.withLock { $0 = (devices.compactMap { DeviceID($0) }, messages, failing) }
        }
        /// Asked once a sweep: what it returns is the sweep's whole list.
        func take() -> [DeviceID] { state.withLock { s in defer { s.devices = [] }; return s.devices } }
        var messages: Int { state.withLock { $0.messages } }
        func fails(_ device: DeviceID) -> Bool {
            state.withLock { s in defer { if s.failing == device.rawValue { s.failing = nil } }; return s.failing == device.rawValue }
        }
    }

    struct SweepFailed: Error {}

    let due = Due()

    /// The tally service, its sweep's candidates and what each one's sweep publishes set by `due`.
    func harness() throws -> HostHarness {
        try HostHarness(sweep: SweepRoute<Tally>(every: .seconds(1), candidates: { [due] _ in due.take() }, apply: { [due] work in
            if due.fails(work.device) { throw SweepFailed() }
            work.row.total += 1_000
            for _ in 0..<due.messages { work.emit(.diagnostic(code: "swept", message: work.device.rawValue)) }
        }))
    }

    @Test func aLargeSweepIsLookedAtASliceAtATimeWithFixesReadBetween() throws {
        let h = try harness(), host = h.host!
        let fleet = (0..<20).map { "d\($0)" }
        due.set(fleet)
        host.tick()
        #expect(host.commit())
        #expect(h.events("swept") == Array(fleet.prefix(ServiceHost<Tally>.sweepSliceDevices)))
        // A fix read between slices is published with its pass, not after the rest of the sweep.
        host.receive(h.item("d19", 1, 1))
        #expect(host.continueSweep())
        #expect(host.commit())
        #expect(h.bus.messages(topicSuffix: "tracker/d19/points").count == 1)
        #expect(h.events("swept") == Array(fleet.prefix(2 * ServiceHost<Tally>.sweepSliceDevices)))
        #expect(!host.continueSweep(), "the last slice says nothing is left")
        #expect(host.commit())
        #expect(h.events("swept") == fleet)
        #expect(!host.continueSweep())
        // Every device swept once; the one that sent a fix meanwhile has both.
        #expect(try h.total("d19") == 1_001)
        #expect(try h.total("d0") == 1_000)
    }

    @Test func aSliceEndsOnceItHasPublishedItsShareOfMessages() throws {
        let h = try harness(), host = h.host!
        // Ten messages a device: the slice's 16 are reached by the second.
        due.set((0..<5).map { "d\($0)" }, messages: 10)
        host.tick()
        #expect(host.commit())
        #expect(h.events("swept").count == 20)
        #expect(host.continueSweep())
        #expect(host.commit())
        #expect(h.events("swept").count == 40)
        #expect(!host.continueSweep())
        #expect(host.commit())
        #expect(h.events("swept").count == 50)
    }

    /// A fleet's held fixes all coming due (its first fixes) are released as
    /// fast as they come due: the slices grow so the sweep's candidates are
    /// looked at before it asks again, up to their largest size.
    @Test func slicesGrowWithWhatWaitsUpToTheirLargest() throws {
        typealias Host = ServiceHost<Tally>
        let h = try harness(), host = h.host!
        // A hundred slices in the sweep's second: 2,000 devices are 20 a slice.
        due.set((0..<2_000).map { "d\($0)" })
        host.tick()
        #expect(host.commit())
        #expect(h.events("swept").count == 20)
        // Half the second gone, 1,980 left over its last 50 slices.
        h.clock.advance(by: .milliseconds(500))
        #expect(host.continueSweep())
        #expect(host.commit())
        #expect(h.events("swept").count == 20 + 40)
        // The second over and 1,940 left: the largest slice, not all of them at once.
        h.clock.advance(by: .milliseconds(600))
        #expect(host.continueSweep())
        #expect(host.commit())
        #expect(h.events("swept").count == 60 + Host.sweepSliceDevicesAtMost)
    }

    /// A few dozen devices due together are still spread over the least slices.
    @Test func aFewDozenTakeTheLeastSlice() throws {
        let h = try harness(), host = h.host!
        due.set((0..<60).map { "d\($0)" })
        host.tick()
        #expect(host.commit())
        #expect(h.events("swept").count == ServiceHost<Tally>.sweepSliceDevices)
    }

    @Test func aSliceTakesNothingOnABatchThatFailedAndTheNextGoesOn() throws {
        let h = try harness(), host = h.host!
        let fleet = (0..<20).map { "d\($0)" }
        due.set(fleet, failing: "d3")
        host.tick()  // d0…d2 applied, then d3 throws: the batch has failed
        #expect(host.continueSweep(), "the rest still waits")
        #expect(!host.commit(), "the failed batch is not stored")
        #expect(h.events("swept").isEmpty)
        // A new batch: the slice after d3, not what the failed batch's slice would have taken.
        #expect(host.continueSweep())
        #expect(host.commit())
        #expect(h.events("swept") == Array(fleet[4..<12]))
        #expect(try h.total("d0") == 0, "rolled back with its batch (a real sweep finds it due again)")
    }

    /// The network loop drives the slices: with ticks an hour apart, the
    /// first tick's sweep still ends, slice after slice, between reads.
    @Test func theNetworkLoopLooksAtEverySliceWithoutWaitingForATick() async throws {
        let broker = try TestBroker()
        let h = try harness(), host = h.host!
        let fleet = (0..<30).map { "d\($0)" }
        due.set(fleet)
        let input = try MQTTClient(MQTTOptions(port: broker.port, clientID: "sweep-slices", cleanStart: true))
        let output = try MQTTClient(MQTTOptions(port: broker.port, clientID: "sweep-slices-out", cleanStart: true))
        ServiceRunner.drive(host, from: input, output: output, pressure: OutputPressure(limit: 1_000, counters: HealthCounters()),
                            tickInterval: .seconds(3_600)) { host.tick() }
        try await input.connect()
        let deadline = ContinuousClock.now + .seconds(10)
        while h.events("swept").count < fleet.count, ContinuousClock.now < deadline { await Task.yield() }
        #expect(h.events("swept") == fleet)
        await input.disconnect()
    }
    @Test func theNextSweepAsksForCandidatesOnlyOnceTheQueueIsEmpty() throws {
        let h = try harness(), host = h.host!
        due.set((0..<10).map { "d\($0)" })
        host.tick()
        #expect(host.commit())
        // A second of the clock later, two devices still wait: the sweep does not ask again (its answer is taken from `due`).
        due.set(["late"])
        h.clock.advance(by: .seconds(1))
        host.tick()
        #expect(host.commit())
        #expect(h.events("swept").count == 10, "the queued two, not a new list")
        h.clock.advance(by: .seconds(1))
        host.tick()
        #expect(host.commit())
        #expect(h.events("swept").last == "late")
    }
}

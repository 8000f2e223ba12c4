import Bus
import Foundation
import Model
@testable import Runtime
import TestSupport
import Testing

/// The outbox follows what is in flight, not the fleet: a device whose
/// messages are all acknowledged and whose watermark is saved is forgotten,
/// and comes back with the right watermark when it sends again. Health's
/// stream tips come from the newest sends.
@Suite struct OutboxFollowsWhatIsInFlightTests {
    let clock = ManualClock()
    let bus = RecordingBus()

    func outbox() -> Outbox { Outbox(topic: { "tracker/\($0)/points" }, clock: clock) }

    @Test func aSettledDeviceIsForgottenAndComesBackWhereItWas() throws {
        let outbox = outbox()
        for d in 0..<200 { try outbox.send(DeviceID("d\(d)")!, seq: 1, body: [1], on: bus) }
        try outbox.send(DeviceID("d0")!, seq: 2, body: [1], on: bus)
        outbox.forgetSettled()
        #expect(outbox.followedDevices == 200, "nothing acknowledged yet: all followed")
        bus.acknowledgeAll()
        outbox.forgetSettled()
        #expect(outbox.followedDevices == 200, "acknowledged but not saved: still followed")
        let moved = outbox.takeUnsaved()
        #expect(moved.count == 200)
        #expect(moved.first { $0.0.rawValue == "d0" }?.1 == 2)
        outbox.forgetSettled()
        #expect(outbox.followedDevices == 0)
        // Back with a gap in its seqs (rejected fixes publish nothing): everything below counts as acknowledged.
        try outbox.send(DeviceID("d0")!, seq: 5, body: [1], on: bus)
        #expect(outbox.ackedThrough(DeviceID("d0")!) == 4)
        #expect(outbox.takeUnsaved().isEmpty)
        bus.acknowledgeAll()
        #expect(outbox.takeUnsaved().map(\.1) == [5])
    }

    @Test func aWatermarkCarriedWithItsRowIsNotSavedAgainAndAQuietOneWaitsItsTurn() throws {
        let outbox = outbox()
        let a = DeviceID("a")!, b = DeviceID("b")!
        try outbox.send(a, seq: 1, body: [1], on: bus)
        try outbox.send(b, seq: 1, body: [1], on: bus)
        bus.acknowledgeAll()
        let movedMs = clock.nowMs()
        #expect(outbox.carry(a) == 1)
        #expect(outbox.carry(a) == nil, "carried once: nothing new to write")
        #expect(outbox.takeUnsaved(movedByMs: movedMs - 1).isEmpty, "b moved after the cutoff: it waits")
        clock.advance(by: .seconds(5))
        #expect(outbox.takeUnsaved(movedByMs: movedMs).map(\.0) == [b], "a was carried; b's turn came")
        // A carried watermark whose write failed is offered again.
        try outbox.send(a, seq: 2, body: [1], on: bus)
        bus.acknowledgeAll()
        let carried = try #require(outbox.carry(a))
        outbox.unsave([(a, carried)])
        #expect(outbox.takeUnsaved().map(\.1) == [2])
    }

    @Test func aFleetFallingQuietAtOnceIsSavedAFewAtATime() throws {
        let outbox = outbox()
        for d in 0..<250 { try outbox.send(DeviceID("d\(d)")!, seq: 1, body: [1], on: bus) }
        bus.acknowledgeAll()
        #expect(outbox.takeUnsaved(limit: 100).count == 100)
        #expect(outbox.takeUnsaved(limit: 100).count == 100)
        #expect(outbox.takeUnsaved(limit: 100).count == 50)
        #expect(outbox.takeUnsaved().isEmpty, "each saved once")
    }

    @Test func aFailedSaveKeepsTheDeviceFollowed() throws {
        let outbox = outbox()
        for d in 0..<100 { try outbox.send(DeviceID("d\(d)")!, seq: 1, body: [1], on: bus) }
        bus.acknowledgeAll()
        let moved = outbox.takeUnsaved()
        outbox.unsave(moved)
        outbox.forgetSettled()
        #expect(outbox.followedDevices == 100)
        #expect(outbox.takeUnsaved().count == 100)
    }

    @Test func aDeviceStillInFlightAtOneForgettingIsForgottenOnceItSettles() throws {
        let outbox = outbox()
        for d in 0..<100 { try outbox.send(DeviceID("d\(d)")!, seq: 1, body: [1], on: bus) }
        bus.acknowledgeAll()
        for d in 0..<70 { try outbox.send(DeviceID("d\(d)")!, seq: 2, body: [1], on: bus) }
        #expect(outbox.takeUnsaved().count == 100)
        outbox.forgetSettled()
        #expect(outbox.followedDevices == 70, "the 70 with a message in flight stay")
        bus.acknowledgeAll()
        outbox.forgetSettled()
        #expect(outbox.followedDevices == 70, "acknowledged, not yet saved")
        #expect(Set(outbox.takeUnsaved().map(\.1)) == [2])
        outbox.forgetSettled()
        #expect(outbox.followedDevices == 0)
    }

    @Test func tipsAreTheNewestSendsOfDevicesThatFellQuiet() throws {
        let outbox = outbox()
        try outbox.send(DeviceID("old")!, seq: 3, body: [1], on: bus)
        clock.advance(by: .seconds(400))
        try outbox.send(DeviceID("a")!, seq: 1, body: [1], on: bus)
        try outbox.send(DeviceID("b")!, seq: 7, body: [1], on: bus)
        try outbox.send(DeviceID("a")!, seq: 2, body: [1], on: bus)
        clock.advance(by: .seconds(2))
        try outbox.send(DeviceID("busy")!, seq: 9, body: [1], on: bus)
        // `busy` sent just now, `old` too long ago; `a` counts with its newest seq.
        #expect(outbox.tips() == ["a": 2, "b": 7])
        #expect(outbox.tips(limit: 1).count == 1)
        bus.acknowledgeAll()
        _ = outbox.takeUnsaved()
        outbox.forgetSettled()
        #expect(outbox.tips() == ["a": 2, "b": 7], "forgetting settled devices keeps their tips")
    }

    /// A quiet device waits for its watermark's save, with a large fleet
    /// for long: it keeps no room for messages in flight meanwhile (100,000
    /// such devices held about 10 MB of it).
    @Test func aDeviceWaitingForItsSaveHoldsNoRoomForMessagesInFlight() throws {
        let outbox = outbox()
        let device = DeviceID("d")!
        for seq in 1...3 { try outbox.send(device, seq: Int64(seq), body: [1], on: bus) }
        #expect((outbox.inFlightCapacityForTests(device) ?? 0) >= 3)
        bus.acknowledgeAll()
        #expect(outbox.ackedThrough(device) == 3)
        #expect(outbox.inFlightCapacityForTests(device) == 0)
    }
}

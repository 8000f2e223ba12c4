import Model
@testable import Runtime
import Testing

/// The marks committed lately: the newest wins, and two generations of
/// `capacity` bound what is kept; a mark let go is simply not known.
@Suite struct RecentMarksTests {
    func key(_ device: String, _ input: String = "points") -> StreamRepairs.Key { .init(device: DeviceID(device)!, input: input) }

    @Test func theNewestMarkWinsAndOldOnesAreLetGo() {
        var marks = RecentMarks(capacity: 3)
        marks.record(DeviceID("a")!, ["points": InputMark(epoch: "e", seq: 1), "motion": InputMark(epoch: nil, seq: 4)])
        marks.record(DeviceID("a")!, ["points": InputMark(epoch: "e", seq: 2)])
        #expect(marks[key("a")] == InputMark(epoch: "e", seq: 2))
        #expect(marks[key("a", "motion")]?.seq == 4)
        for d in 0..<6 { marks.record(DeviceID("d\(d)")!, ["points": InputMark(epoch: "e", seq: Int64(d))]) }
        #expect(marks[key("a")] == nil, "two generations later")
        #expect(marks[key("d5")]?.seq == 5 && marks[key("d3")]?.seq == 3)
        #expect(marks.count <= 6)
    }
}

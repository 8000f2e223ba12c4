import Model
@testable import Runtime
import Testing

/// The replies of every partition to one `_fleet` command, made one.
@Suite struct FleetGatherTests {
    let asker = FleetGather.Asker(topic: "tracker/_ctl/op/reply", correlationData: [7])

    func gather(_ partitions: Int = 3, maxReplyBytes: Int = 1 << 20) -> FleetGather {
        FleetGather(partitions: partitions, timeoutMs: 120_000, maxReplyBytes: maxReplyBytes, capacity: 2)
    }

    func crossing(_ timeMs: Int, _ device: String) -> JSONValue {
        .object(["timeMs": .number(Double(timeMs)), "device": .string(device)])
    }

    func page(_ items: [JSONValue], cut: Bool = false) -> CommandReply {
        var reply = CommandReply.success(id: .string("q"), .array(items))
        if cut { reply.nextOffset = items.count }
        return reply
    }

    /// Answers once every partition replied, in any order, and never for a
    /// repeat, an unknown gather or a partition out of range.
    @Test func answersOnceEveryPartitionReplied() {
        var fleet = gather()
        let started = fleet.start("g", asker: asker, how: .sum, page: nil, nowMs: 0)
        #expect(started)
        var early: [FleetGather.Answer?] = []
        early.append(fleet.reply("g", partition: 2, .success(id: .string("q"), .number(3))))
        early.append(fleet.reply("g", partition: 2, .success(id: .string("q"), .number(3))))  // a repeat
        early.append(fleet.reply("other", partition: 0, .success(id: nil, .number(100))))  // no such gather
        early.append(fleet.reply("g", partition: 5, .success(id: nil, .number(100))))  // no such partition
        early.append(fleet.reply("g", partition: 0, .success(id: .string("q"), .number(4))))
        #expect(early.allSatisfy { $0 == nil })
        let answer = fleet.reply("g", partition: 1, .success(id: .string("q"), .number(0)))
        #expect(answer?.asker == asker)
        #expect(answer?.reply == .success(id: .string("q"), .number(7)))
        #expect(fleet.count == 0)
        let late = fleet.reply("g", partition: 1, .success(id: nil, .number(1)))
        #expect(late == nil)
    }

    /// `getLive`'s pages: every partition's frames in device order, up to
    /// the first device a partition stopped at, then the asker's limit.
    @Test func pagesInKeyOrderMergeUpToTheFirstStop() {
        func page(_ devices: [String], next: String?) -> CommandReply {
            var page: [String: JSONValue] = ["frames": .array(devices.map { .object(["device": .string($0)]) })]
            if let next { page["next"] = .string(next) }
            return .success(id: .string("q"), .object(page))
        }
        func merged(_ replies: [CommandReply], limit: Int = 1_000, maxReplyBytes: Int = 1 << 20) -> (devices: [String], next: String?) {
            let reply = gather(replies.count, maxReplyBytes: maxReplyBytes)
                .merge(replies, how: .inKeyOrder(items: "frames", key: "device"), page: .init(limit: limit, offset: 0))
            return (reply.result?["frames"]?.arrayValue?.compactMap { $0["device"]?.stringValue } ?? [], reply.result?["next"]?.stringValue)
        }
        // Partition 0 stopped at "c": partition 1's "d" and "e" come with the next page.
        #expect(merged([page(["a", "c"], next: "c"), page(["b", "d", "e"], next: nil)]) == (["a", "b", "c"], "c"))
        #expect(merged([page(["a", "c"], next: nil), page(["b", "d", "e"], next: nil)]) == (["a", "b", "c", "d", "e"], nil))
        // Together more than the asker's limit, or than a reply holds: cut there, with a next.
        #expect(merged([page(["a", "c"], next: nil), page(["b", "d", "e"], next: nil)], limit: 2) == (["a", "b"], "b"))
        #expect(merged([page(["a", "c"], next: nil), page(["b", "d"], next: nil)], maxReplyBytes: 100) == (["a", "b"], "b"))
        let broken = gather(2).merge([page(["a"], next: nil), .success(id: nil, .array([]))], how: .inKeyOrder(items: "frames", key: "device"), page: nil)
        #expect(broken.code == "internal")
    }

    @Test func aFailureOfAnyPartitionIsTheAnswer() {
        var fleet = gather()
        _ = fleet.start("g", asker: asker, how: .same, page: nil, nowMs: 0)
        _ = fleet.reply("g", partition: 0, .success(id: .string("q"), .bool(true)))
        _ = fleet.reply("g", partition: 1, .failure(id: .string("q"), CommandError(.badInput, "radiusM must be > 0")))
        let answer = fleet.reply("g", partition: 2, .success(id: .string("q"), .bool(true)))
        #expect(answer?.reply.ok == false)
        #expect(answer?.reply.code == "badInput")
    }

    @Test func theSameStateAnswersAsPartitionZero() {
        var fleet = gather(2)
        _ = fleet.start("g", asker: asker, how: .same, page: nil, nowMs: 0)
        _ = fleet.reply("g", partition: 1, .success(id: .string("q"), .string("b")))
        let answer = fleet.reply("g", partition: 0, .success(id: .string("q"), .string("a")))
        #expect(answer?.reply.result == .string("a"))
    }

    /// A history merged newest first across partitions, then the asker's page of it.
    @Test func pagesMergeNewestFirstThenTheAskersPage() {
        var fleet = gather()
        _ = fleet.start("g", asker: asker, how: .newestFirst(by: "timeMs"), page: .init(limit: 3, offset: 1), nowMs: 0)
        _ = fleet.reply("g", partition: 0, page([crossing(90, "a"), crossing(40, "a")]))
        _ = fleet.reply("g", partition: 1, page([]))
        let answer = fleet.reply("g", partition: 2, page([crossing(70, "c"), crossing(40, "c"), crossing(10, "c")]))
        // All: 90a 70c 40a 40c 10c (a tie in partition order); offset 1, limit 3.
        #expect(answer?.reply.result == .array([crossing(70, "c"), crossing(40, "a"), crossing(40, "c")]))
        #expect(answer?.reply.nextOffset == nil)
    }

    /// A partition's page cut short by its reply bound may hold older items
    /// not sent: the merge stops at its last one, and says where to go on.
    @Test func aPartitionsPageCutShortEndsTheExactPart() {
        var fleet = gather(2)
        _ = fleet.start("g", asker: asker, how: .newestFirst(by: "timeMs"), page: .init(limit: 10, offset: 0), nowMs: 0)
        _ = fleet.reply("g", partition: 0, page([crossing(90, "a"), crossing(50, "a")], cut: true))
        let answer = fleet.reply("g", partition: 1, page([crossing(80, "b"), crossing(60, "b"), crossing(20, "b")]))
        #expect(answer?.reply.result == .array([crossing(90, "a"), crossing(80, "b"), crossing(60, "b"), crossing(50, "a")]))
        #expect(answer?.reply.nextOffset == 4)

        // Asked from beyond what the cut pages hold together: refused, saying how to ask.
        _ = fleet.start("h", asker: asker, how: .newestFirst(by: "timeMs"), page: .init(limit: 10, offset: 5), nowMs: 0)
        _ = fleet.reply("h", partition: 0, page([crossing(90, "a")], cut: true))
        let beyond = fleet.reply("h", partition: 1, page([crossing(80, "b")], cut: true))
        #expect(beyond?.reply.code == "badInput")
    }

    @Test func aMergedPageStaysWithinTheReplyBound() {
        var fleet = gather(2, maxReplyBytes: 100)
        _ = fleet.start("g", asker: asker, how: .newestFirst(by: "timeMs"), page: .init(limit: 10, offset: 0), nowMs: 0)
        _ = fleet.reply("g", partition: 0, page((0..<5).map { crossing(100 - $0, "a") }))
        let answer = fleet.reply("g", partition: 1, page((0..<5).map { crossing(50 - $0, "b") }))
        guard case .array(let items) = answer?.reply.result else { Issue.record("no page"); return }
        #expect(items.count == 3 && items.first == crossing(100, "a"))
        #expect(answer?.reply.nextOffset == 3)
    }

    /// A partition that never answers (its instance gone, none took it over
    /// yet): `timeout` at the deadline, naming it; the rest wait on.
    @Test func aGatherPastItsDeadlineIsAnsweredTimeout() {
        var fleet = gather()
        _ = fleet.start("g", asker: asker, how: .sum, page: nil, nowMs: 0)
        _ = fleet.start("h", asker: asker, how: .sum, page: nil, nowMs: 60_000)
        _ = fleet.reply("g", partition: 0, .success(id: .string("q"), .number(1)))
        #expect(fleet.expire(nowMs: 119_999).isEmpty)
        let expired = fleet.expire(nowMs: 120_000)
        #expect(expired.count == 1)
        #expect(expired.first?.reply.code == "timeout")
        #expect(expired.first?.reply.id == .string("q"))
        #expect(expired.first?.reply.message?.contains("partitions 1, 2 of 3") == true)
        #expect(fleet.count == 1)
    }

    /// No partition answered: the timeout still carries the request's id; a
    /// gather started with a longer wait (a command that waits itself) gets it.
    @Test func aTimeoutWithNoReplyCarriesTheRequestsIDAndAGatherMayWaitLonger() {
        var fleet = gather(2)
        _ = fleet.start("quick", asker: asker, how: .same, page: nil, requestID: .string("r1"), nowMs: 0)
        _ = fleet.start("slow", asker: asker, how: .same, page: nil, requestID: .string("r2"), nowMs: 0, timeoutMs: 3_660_000)
        let first = fleet.expire(nowMs: 120_000)
        #expect(first.map(\.reply.id) == [.string("r1")])
        #expect(first.first?.reply.message?.contains("partitions 0, 1 of 2") == true)
        #expect(fleet.expire(nowMs: 3_659_999).isEmpty)
        #expect(fleet.expire(nowMs: 3_660_000).map(\.reply.id) == [.string("r2")])
    }

    @Test func pastItsCapacityNothingStarts() {
        var fleet = gather()
        let started = ["a", "b", "c"].map { fleet.start($0, asker: asker, how: .sum, page: nil, nowMs: 0) }
        #expect(started == [true, true, false])
    }

    @Test func combiners() {
        func combined(_ how: FleetReplies, _ results: [JSONValue]) -> JSONValue? {
            guard case .combine(let combine) = how else { return nil }
            return combine(results)
        }
        #expect(combined(.sum, [.number(2), .number(0), .number(5)]) == .number(7))
        #expect(combined(.anyTrue, [.bool(false), .bool(true)]) == .bool(true))
        #expect(combined(.anyTrue, [.bool(false), .bool(false)]) == .bool(false))
        #expect(combined(.largest, [.number(2), .number(3)]) == .number(3))
    }
}

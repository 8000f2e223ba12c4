import GatewayCore
import Model
import Testing

@Suite struct SessionRulesTests {
    let device = DeviceID("p1")!
    var counter = 0
    let rules = SessionRules(policy: SessionPolicy(autoSession: true, idleTimeoutMs: 60_000))

    func ids() -> () -> String {
        var n = 0
        return { n += 1; return "s\(n)" }
    }

    @Test func autoSessionOpensOnFirstFixAndSplitsOnIdle() {
        var state = DeviceSessions()
        let newID = ids()
        let first = rules.fixArrived(&state, device: device, fixMs: 1_000, receivedMs: 5, newID: newID)
        #expect(first.count == 1)
        guard case .opened(let s1)? = first.first else { Issue.record(); return }
        #expect(s1.startMs == 1_000 && s1.auto == true)
        #expect(rules.fixArrived(&state, device: device, fixMs: 50_000, receivedMs: 6, newID: newID).isEmpty)
        // 61 s of silence by the fixes' own clock: closed at the last fix, a new one opens.
        let split = rules.fixArrived(&state, device: device, fixMs: 111_001, receivedMs: 7, newID: newID)
        #expect(split.count == 2)
        guard case .closed(let closed) = split[0], case .opened(let s2) = split[1] else { Issue.record(); return }
        #expect(closed.id == "s1" && closed.endMs == 50_000)
        #expect(s2.id == "s2" && s2.startMs == 111_001)
    }

    @Test func lateFixesStayInTheirSession() {
        var state = DeviceSessions()
        let newID = ids()
        _ = rules.fixArrived(&state, device: device, fixMs: 100_000, receivedMs: 1, newID: newID)
        #expect(rules.fixArrived(&state, device: device, fixMs: 10_000, receivedMs: 2, newID: newID).isEmpty)
        #expect(state.lastFixMs == 100_000)
    }

    @Test func wallClockSweepClosesASilentDevice() {
        var state = DeviceSessions()
        _ = rules.fixArrived(&state, device: device, fixMs: 1_000, receivedMs: 10_000, newID: ids())
        #expect(rules.sweep(&state, nowMs: 60_000) == nil)
        guard case .closed(let s)? = rules.sweep(&state, nowMs: 70_001) else { Issue.record(); return }
        #expect(s.endMs == 1_000 && state.current == nil)
    }

    @Test func startAndStopCommands() throws {
        var state = DeviceSessions()
        let newID = ids()
        #expect(throws: CommandError(.notReady, "no session is open for this device")) {
            try rules.stop(&state, nowMs: 1)
        }
        let opened = rules.start(&state, device: device, tag: "route 7", nowMs: 500, newID: newID)
        #expect(opened.count == 1)
        // A manual session is not closed by idleness.
        #expect(rules.sweep(&state, nowMs: 10_000_000) == nil)
        let stopped = try rules.stop(&state, nowMs: 9_000)
        #expect(stopped.tag == "route 7" && stopped.startMs == 500 && stopped.endMs == 9_000)
        #expect(state.current == nil)
    }

    @Test func noAutoSessionWhenDisabled() {
        let manual = SessionRules(policy: SessionPolicy(autoSession: false, idleTimeoutMs: 60_000))
        var state = DeviceSessions()
        #expect(manual.fixArrived(&state, device: device, fixMs: 1, receivedMs: 1, newID: ids()).isEmpty)
        #expect(state.current == nil)
    }
}

import Model

/// When sessions open and close by themselves.
public struct SessionPolicy: Sendable, Equatable {
    /// Open a session on a device's first fix when none is open.
    public var autoSession: Bool
    /// Close an auto session after this much silence, judged by the fixes'
    /// own times and, for a device that simply stops, by the wall clock.
    public var idleTimeoutMs: Int64

    public init(autoSession: Bool = true, idleTimeoutMs: Int64 = 30 * 60_000) {
        self.autoSession = autoSession
        self.idleTimeoutMs = idleTimeoutMs
    }
}

/// A device's session bookkeeping, as the store keeps it.
public struct DeviceSessions: Codable, Sendable, Equatable {
    public var current: Session?
    /// Time of the newest fix in the current session.
    public var lastFixMs: Int64?
    /// Wall-clock time the newest fix arrived.
    public var lastReceivedMs: Int64?

    public init(current: Session? = nil, lastFixMs: Int64? = nil, lastReceivedMs: Int64? = nil) {
        self.current = current; self.lastFixMs = lastFixMs; self.lastReceivedMs = lastReceivedMs
    }
}

public enum SessionEffect: Equatable, Sendable {
    case opened(Session)
    case closed(Session)
}

/// The session rules. Pure: ids and times come in as arguments.
public struct SessionRules: Sendable {
    public var policy: SessionPolicy
    public init(policy: SessionPolicy) { self.policy = policy }

    /// A fix arrives: maybe close an idle auto session and open a new one.
    public func fixArrived(_ state: inout DeviceSessions, device: DeviceID, fixMs: Int64, receivedMs: Int64,
                           newID: () -> String) -> [SessionEffect] {
        var effects: [SessionEffect] = []
        if var open = state.current, open.auto == true, let last = state.lastFixMs,
           fixMs - last > policy.idleTimeoutMs {
            open.endMs = last
            effects.append(.closed(open))
            state.current = nil
        }
        if state.current == nil, policy.autoSession {
            let session = Session(id: newID(), device: device, tag: "auto", startMs: fixMs, auto: true)
            state.current = session
            state.lastFixMs = nil
            effects.append(.opened(session))
        }
        if state.current != nil { state.lastFixMs = max(state.lastFixMs ?? fixMs, fixMs) }
        state.lastReceivedMs = receivedMs
        return effects
    }

    /// `start {tag}`: closes whatever is open and opens a new session now.
    public func start(_ state: inout DeviceSessions, device: DeviceID, tag: String?, nowMs: Int64,
                      newID: () -> String) -> [SessionEffect] {
        var effects: [SessionEffect] = []
        if var open = state.current {
            open.endMs = max(open.startMs, state.lastFixMs ?? nowMs)
            if open.auto != true { open.endMs = nowMs }
            effects.append(.closed(open))
        }
        let session = Session(id: newID(), device: device, tag: tag, startMs: nowMs, auto: false)
        state.current = session
        state.lastFixMs = nil
        effects.append(.opened(session))
        return effects
    }

    /// `stop`: closes the open session, or says there is none.
    public func stop(_ state: inout DeviceSessions, nowMs: Int64) throws(CommandError) -> Session {
        guard var open = state.current else { throw CommandError(.notReady, "no session is open for this device") }
        open.endMs = open.auto == true ? max(open.startMs, state.lastFixMs ?? nowMs) : max(open.startMs, nowMs)
        state.current = nil
        state.lastFixMs = nil
        return open
    }

    /// An auto session is open and its device has been silent past the idle timeout.
    public func isIdle(_ state: DeviceSessions, nowMs: Int64) -> Bool {
        guard state.current?.auto == true, let received = state.lastReceivedMs else { return false }
        return nowMs - received > policy.idleTimeoutMs
    }

    /// The wall-clock sweep: an auto session whose device fell silent closes.
    public func sweep(_ state: inout DeviceSessions, nowMs: Int64) -> SessionEffect? {
        guard isIdle(state, nowMs: nowMs), var open = state.current else { return nil }
        open.endMs = max(open.startMs, state.lastFixMs ?? open.startMs)
        state.current = nil
        state.lastFixMs = nil
        return .closed(open)
    }
}

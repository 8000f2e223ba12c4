import Bus
import FoundationEssentials
import Model
import MotionCore
import Runtime

/// Carries out the cores' decisions on the store and the work's effects.
/// Runs on the host's network thread only, like the caches it keeps.
final class MotionHandler {
    let store: MotionStore
    let settings: MotionSettings
    let core: MotionCore
    let geofencing: Geofencing
    let routeWatch: RouteWatch
    /// Fence indexes by owner, loaded from the store on first use.
    private var fenceIndexes: [DeviceID: FenceIndex] = [:]
    /// The owners that have fences stored, read once: most of a fleet has
    /// none, and its devices then cost no query each time they drop out of
    /// `fenceIndexes` (with more devices than it holds, at every point).
    private var fenceOwners: Set<DeviceID>?
    private var activeRoutes: [DeviceID: ActiveRoute] = [:]
    static let cachedOwners = 10_000

    init(store: MotionStore, settings: MotionSettings) {
        self.store = store
        self.settings = settings
        core = MotionCore(rules: settings.rules)
        geofencing = Geofencing(rules: settings.geofenceRules)
        routeWatch = RouteWatch(rules: settings.routeRules)
    }

    /// A rolled-back batch may have changed fences or routes that were never stored.
    func forgetCaches() {
        fenceIndexes.removeAll()
        fenceOwners = nil
        activeRoutes.removeAll()
    }

    func fences(_ owner: DeviceID) throws -> FenceIndex {
        if let index = fenceIndexes[owner] { return index }
        if fenceIndexes.count >= Self.cachedOwners { fenceIndexes.removeAll(keepingCapacity: true) }
        if fenceOwners == nil { fenceOwners = try store.fenceOwners() }
        let index = FenceIndex(fenceOwners?.contains(owner) == true ? try store.fences(owner) : [], fleet: owner == .fleet)
        fenceIndexes[owner] = index
        return index
    }

    /// A fence stored for `owner`, in the batch: its index (from `fences`) is cached and takes it.
    func saveFence(_ fence: Geofence, in index: FenceIndex, owner: DeviceID) throws {
        try store.saveFence(fence, owner: owner)
        fenceOwners?.insert(owner)
        index.upsert(fence)
    }

    func forgetRoute(_ device: DeviceID) { activeRoutes[device] = nil }

    private func route(_ device: DeviceID) throws -> ActiveRoute? {
        if let route = activeRoutes[device] { return route }
        guard let points = try store.route(device) else { return nil }
        if activeRoutes.count >= Self.cachedOwners { activeRoutes.removeAll(keepingCapacity: true) }
        let route = ActiveRoute(points.map { ($0.latitude, $0.longitude) })
        activeRoutes[device] = route
        return route
    }

    // MARK: Inputs

    func point(_ point: TrackPoint, receivedMs: Int64?, _ work: Work<MotionDeviceRow>) throws {
        var row = work.row
        if let session = point.sessionID, session != row.closedSession { row.openSession = session }
        let previous = row.motion.lastPoint
        let changes = core.handle(point: point, row: &row.motion)
        let crossings = geofencing.handle(point: point, previous: previous, visits: &row.visits,
                                          own: try fences(work.device), fleet: try fences(.fleet))
        row.advanceClock(toMs: point.timeMs, wallMs: work.nowMs)
        work.row = row
        try apply(changes, work)
        try apply(crossings, work)
        if work.row.route != nil, let route = try route(work.device) {
            switch routeWatch.handle(point: point, route: route, progress: &work.row.route!) {
            case .off(let d)?: work.emit(.offRoute(point: point, distanceM: d), timeMs: point.timeMs)
            case .on(let d)?: work.emit(.onRoute(point: point, distanceM: d), timeMs: point.timeMs)
            case nil: break
            }
        }
        heartbeatIfDue(until: point.timeMs, work)
        try updateTimer(work)
        // History is kept for `historyRetentionDays` in the points' own time (a replay is not purged on arrival).
        if point.seq % 512 == 0 { try store.trimHistory(work.device, before: point.timeMs - settings.historyRetentionMs) }
        work.processed()
        work.lag(receivedMs: receivedMs, fixMs: point.timeMs)
    }

    func activity(_ payload: [UInt8], _ work: Work<MotionDeviceRow>) throws {
        let reading: ActivityReading
        do { reading = try JSONCoding.decoder.decode(ActivityReading.self, from: Data(payload)) } catch {
            throw InputRefusal(.badInput, "activity: \(DecodingErrorText.describe(any: error)); expected {\"activity\":\"walking\",\"confidence\":66}")
        }
        guard ActivityReading.known.contains(reading.activity) else {
            throw InputRefusal(.badInput, "activity: '\(reading.activity.prefix(40))' is not one of \(ActivityReading.known.sorted().joined(separator: ", "))")
        }
        guard (0...100).contains(reading.confidence) else {
            throw InputRefusal(.badInput, "activity: confidence must be 0…100, got \(reading.confidence)")
        }
        let changes = core.handle(activity: reading, row: &work.row.motion)
        let timeMs = reading.t.map { Int64(($0 * 1000).rounded()) } ?? work.row.deviceTime(wallMs: work.nowMs)
        if let confident = work.row.motion.activity, confident.activity != work.row.announcedActivity,
           work.nowMs - (work.row.announcedActivityWallMs ?? .min / 2) >= settings.activityChangeIntervalMs {
            work.row.announcedActivity = confident.activity
            work.row.announcedActivityWallMs = work.nowMs
            work.emit(.activityChange(activity: confident.activity, confidence: confident.confidence), timeMs: timeMs)
        }
        try apply(changes, work)
        try updateTimer(work)
        work.processed()
    }

    func sessionEvent(_ payload: [UInt8], _ work: Work<MotionDeviceRow>) throws {
        let said: (started: Bool, sessionID: String)
        if let read = SessionEvents.read(payload) {
            said = read
        } else {
            // Someone else's event: an unreadable one is not ours to refuse.
            guard let event = try? JSONCoding.decoder.decode(Event.self, from: Data(payload)) else { return }
            switch event.body {
            case .sessionStarted(let session): said = (true, session.id)
            case .sessionStopped(let session): said = (false, session.id)
            default: return
            }
        }
        if said.started {
            if said.sessionID != work.row.closedSession { work.row.openSession = said.sessionID }
        } else {
            if work.row.openSession == said.sessionID || work.row.openSession == nil { work.row.openSession = nil }
            work.row.closedSession = said.sessionID
        }
    }

    /// The clock's turn for a silent device: a stop the silence proves, dwells, heartbeats.
    func sweep(_ work: Work<MotionDeviceRow>) throws {
        try runClock(untilMs: work.row.deviceTime(wallMs: work.nowMs), work)
    }

    private func runClock(untilMs nowMs: Int64, _ work: Work<MotionDeviceRow>) throws {
        guard work.row.motion.lastPoint != nil else { return }
        try apply(core.handle(silenceUntil: nowMs, row: &work.row.motion), work)
        if !work.row.visits.isEmpty { try apply(geofencing.dwells(until: nowMs, visits: &work.row.visits), work) }
        heartbeatIfDue(until: nowMs, work)
        try updateTimer(work)
    }

    // MARK: Effects

    func apply(_ changes: [MotionEffect], _ work: Work<MotionDeviceRow>) throws {
        for change in changes {
            switch change {
            case .state(let state, let timeMs, let point):
                work.row.motionSeq += 1
                let message = MotionMessage(device: work.device, seq: work.row.motionSeq, timeMs: timeMs, state: state, epoch: work.epoch)
                try work.send(message, sessionID: point?.sessionID, timeMs: timeMs)
                work.emit(.motionChange(state, point: point), timeMs: timeMs)
                if state == .stationary { settled(at: timeMs, work) }
            case .stopEnded(let stop):
                if try store.record(stop, device: work.device) { work.count("logsCapped") }
                work.emit(.stopEnded(stop), timeMs: stop.departureMs ?? stop.arrivalMs)
            case .tripEnded(let trip):
                if try store.record(trip, device: work.device) { work.count("logsCapped") }
                work.emit(.tripEnded(trip), timeMs: trip.endMs ?? trip.startMs)
            }
        }
    }

    private func settled(at timeMs: Int64, _ work: Work<MotionDeviceRow>) {
        work.row.lastHeartbeatMs = timeMs
        guard settings.stopOnStationary, let session = work.row.openSession else { return }
        // The gateway owns sessions: ask it, as any client would (its reply goes to reply/stop).
        work.publish(MQTTMessage(topic: work.topics.command(work.device, "stop"),
                                 string: #"{"id":"motion:stopOnStationary"}"#))
        work.row.openSession = nil
        work.row.closedSession = session
        work.emit(.diagnostic(code: "stopOnStationary", message: "settled: asked the gateway to stop session \(session)"), timeMs: timeMs)
    }

    func apply(_ crossings: [Crossing], _ work: Work<MotionDeviceRow>) throws {
        for crossing in crossings {
            if try store.record(crossing, device: work.device) { work.count("logsCapped") }
            let fence = try fences(crossing.fleet == true ? .fleet : work.device).fence(crossing.geofenceID)?.fence
            let wanted = switch crossing.kind {
            case .enter: fence?.notifyOnEntry ?? true
            case .exit: fence?.notifyOnExit ?? true
            case .dwell: true
            }
            if wanted { work.emit(.geofence(crossing), timeMs: crossing.timeMs) }
        }
    }

    private func heartbeatIfDue(until nowMs: Int64, _ work: Work<MotionDeviceRow>) {
        guard let interval = settings.heartbeatIntervalMs, work.row.motion.state == .stationary else { return }
        let last = work.row.lastHeartbeatMs ?? nowMs
        guard nowMs - last >= interval else { work.row.lastHeartbeatMs = last; return }
        // One heartbeat, however many intervals a silence covered.
        let due = last + (nowMs - last) / interval * interval
        work.row.lastHeartbeatMs = due
        work.emit(.heartbeat(point: work.row.motion.lastPoint), timeMs: due)
    }

    /// The next thing the clock must do for the device, stored in wall-clock time for the sweep.
    func updateTimer(_ work: Work<MotionDeviceRow>) throws {
        let row = work.row
        var due: [Int64] = row.visits.values.compactMap(\.dwellDueMs)
        let motion = row.motion
        if let state = motion.state, state != .stationary, !settings.rules.disableStopDetection, let anchor = motion.anchor,
           state == .stopPending || (motion.lastPoint?.speedMps ?? .infinity) < 1 {
            due.append(anchor.timeMs + settings.rules.stopTimeoutMs)
        }
        if motion.state == .stationary, let interval = settings.heartbeatIntervalMs, let last = row.lastHeartbeatMs {
            due.append(last + interval)
        }
        let wall: Int64? = due.min().map { deviceDue in
            guard let clock = row.clockMs, let wall = row.clockWallMs else { return work.nowMs }
            return max(work.nowMs, wall + (deviceDue - clock))
        }
        guard wall != row.timerWallMs else { return }
        try store.setTimer(work.device, dueMs: wall)
        work.row.timerWallMs = wall
    }
}

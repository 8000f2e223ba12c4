import FoundationEssentials
import Model

/// The saved state is an envelope, `{"version": 2, "state": {…}}`, with one
/// object per owner inside. Every shape an older release wrote has its
/// migration here, so a new field is added to its owner as what it is (not
/// Optional so that old state still decodes) and the version goes up. The
/// service now writes the binary form (`StoredRow.swift`) and JSON rows are
/// only ever read, so a field added since is read with `decodeIfPresent` by
/// its owner instead (`KalmanState.calibration`).
///
/// - 1: the releases before the envelope. No `version`, every field at the
///   top level; fields added over time are absent in older saves (read as
///   absent: nothing held, nothing learned yet).
/// - 2: the owners (`kalman`, `ordering`, `stop`, `lookAhead`, `smoothing`, `odometer`).
///
/// A state that no version here reads (older than the fields version 1
/// always had, or written by a newer release) restarts the filter but keeps
/// the odometer and the newest judged fix's time (`restored`).
extension DeviceFilterState: Codable {
    /// The version this release writes.
    public static let savedVersion = 2

    private enum EnvelopeKey: String, CodingKey { case version, state }
    private enum OwnerKey: String, CodingKey { case kalman, ordering, stop, lookAhead, smoothing, odometer }

    public func encode(to encoder: any Encoder) throws {
        var envelope = encoder.container(keyedBy: EnvelopeKey.self)
        try envelope.encode(Self.savedVersion, forKey: .version)
        var owners = envelope.nestedContainer(keyedBy: OwnerKey.self, forKey: .state)
        try owners.encode(kalman, forKey: .kalman)
        try owners.encode(ordering, forKey: .ordering)
        try owners.encode(stop, forKey: .stop)
        try owners.encode(lookAhead, forKey: .lookAhead)
        try owners.encode(smoothing, forKey: .smoothing)
        try owners.encode(odometer, forKey: .odometer)
    }

    public init(from decoder: any Decoder) throws {
        let envelope = try decoder.container(keyedBy: EnvelopeKey.self)
        switch try envelope.decodeIfPresent(Int.self, forKey: .version) {
        case nil:
            self.init(migrating: try SavedStateV1(from: decoder))
        case 2:
            let owners = try envelope.nestedContainer(keyedBy: OwnerKey.self, forKey: .state)
            self.init()
            kalman = try owners.decode(KalmanState.self, forKey: .kalman)
            ordering = try owners.decode(OrderingState.self, forKey: .ordering)
            stop = try owners.decode(StopState.self, forKey: .stop)
            lookAhead = try owners.decode(LookAheadState.self, forKey: .lookAhead)
            smoothing = try owners.decode(SmoothingState.self, forKey: .smoothing)
            odometer = try owners.decode(OdometerState.self, forKey: .odometer)
        case let version?:
            throw DecodingError.dataCorruptedError(forKey: .version, in: envelope,
                                                   debugDescription: "filter state version \(version); this release reads 1 and 2")
        }
    }

    /// Version 1, moved to its owners: a filter with both axes runs, one
    /// with only a frame was lost with a clock's timeline, the held fix and
    /// those behind it are one list.
    init(migrating old: SavedStateV1) {
        self.init()
        if let frame = old.frame, let east = old.east, let north = old.north {
            kalman.phase = .tracking(filter: .init(frame: frame, east: east, north: north, timeMs: old.filterTimeMs))
        } else if let frame = old.frame {
            kalman.phase = .lost(frame: frame)
        }
        kalman.noise = old.noise
        kalman.outliers = old.outlierRun
        ordering.newestMs = old.newestMs
        ordering.reportIntervalMs = old.reportIntervalMs
        ordering.newestReceivedMs = old.newestReceivedMs
        ordering.previousPosition = old.previousPosition
        stop.externalMotion = old.externalMotion
        stop.departedMs = old.departedMs
        stop.anchor = old.stationaryAnchor
        stop.leavingCount = old.leavingCount
        stop.trend = old.trend
        stop.standingRun = old.standingRun
        stop.standingMs = old.standingMs
        lookAhead.held = (old.pending.map { [$0] } ?? []) + (old.heldBehind ?? [])
        lookAhead.steady = old.steady
        smoothing.waiting = old.lagging ?? []
        odometer.lastPoint = old.lastAccepted
        odometer.meters = old.odometerM
    }

    /// Restores a saved state. One that does not decode (see above) restarts
    /// the Kalman filter on the next fix but keeps the odometer and the
    /// newest judged fix's time, so the device's points stay continuous.
    public static func restored(from data: Data, using decoder: JSONDecoder) -> (state: DeviceFilterState, restarted: Bool) {
        // Not decoding is the answer, not a failure: the caller logs the restart.
        if let state = try? decoder.decode(DeviceFilterState.self, from: data) { return (state, false) }
        var state = DeviceFilterState()
        // Whatever of the two numbers can be found is kept; nothing else is trusted.
        if let carried = try? decoder.decode(Carried.self, from: data) {
            state.ordering.newestMs = carried.newestMs
            state.odometer.meters = carried.odometerM ?? 0
        }
        return (state, true)
    }

    /// What survives a state that no longer decodes: version 1's top-level
    /// `newestMs` and `odometerM`, or version 2's in their owners.
    private struct Carried: Decodable {
        var newestMs: Int64?
        var odometerM: Double?

        private struct Owners: Decodable { var ordering: Ordering?; var odometer: Odometer? }
        private struct Ordering: Decodable { var newestMs: Int64? }
        private struct Odometer: Decodable { var meters: Double? }
        private enum Key: String, CodingKey { case version, state, newestMs, odometerM }

        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: Key.self)
            if c.contains(.version) {
                let owners = try c.decodeIfPresent(Owners.self, forKey: .state)
                (newestMs, odometerM) = (owners?.ordering?.newestMs, owners?.odometer?.meters)
            } else {
                newestMs = try c.decodeIfPresent(Int64.self, forKey: .newestMs)
                odometerM = try c.decodeIfPresent(Double.self, forKey: .odometerM)
            }
        }
    }
}

/// Version 1 of the saved state, as the releases before the envelope wrote
/// it (read only). Its nested types are today's: one that changes shape
/// needs a frozen copy here, and a new version.
struct SavedStateV1: Decodable {
    var frame: LocalFrame?
    var east: AxisFilter?
    var north: AxisFilter?
    var filterTimeMs: Int64
    var newestMs: Int64?
    var reportIntervalMs: Int64?
    var newestReceivedMs: Int64?
    var lastAccepted: DeviceFilterState.AcceptedPoint?
    var odometerM: Double
    var externalMotion: MotionState?
    var departedMs: Int64?
    var stationaryAnchor: DeviceFilterState.Anchor?
    var outlierRun: [DeviceFilterState.OutlierFix]
    var leavingCount: Int
    var trend: TrendWindows
    var standingRun: DeviceFilterState.StandingRun?
    var previousPosition: DeviceFilterState.Position?
    var pending: FilterInput?
    var heldBehind: [FilterInput]?
    var lagging: [Lagging]?
    var standingMs: Int64?
    var noise: NoiseCorrelation?
    var steady: SteadyTrack?
}

import FoundationEssentials
import Model

/// One device's filter state: everything needed to judge its next fix,
/// persisted with every decision so a restart continues exactly. Each part
/// has one owner, the stage of the filter that writes it; the saved form is
/// versioned (`SavedState.swift`).
public struct DeviceFilterState: Sendable, Equatable {
    /// The Kalman filter, how much the device's errors persist, and the outliers that may restart it.
    public var kalman = KalmanState()
    /// What the fixes before this one said: their time, place and arrival.
    public var ordering = OrderingState()
    /// Whether the device is parked, and what says it is leaving.
    public var stop = StopState()
    /// Sparse fixes held until the next tells a jump from a turn.
    public var lookAhead = LookAheadState()
    /// Fixes judged but not yet published, waiting to be smoothed.
    public var smoothing = SmoothingState()
    /// The last published point and the way counted so far.
    public var odometer = OdometerState()

    public init() {}

    /// The odometer (m).
    public var odometerM: Double { odometer.meters }
    /// The stop detector's recent movement (diagnostics read it).
    public var trend: TrendWindows { stop.trend }

    public struct AcceptedPoint: Codable, Sendable, Equatable {
        public var x: Double, y: Double, timeMs: Int64, accuracyM: Double
        /// The velocity there (east, north; m/s), for the odometer's way to the next point.
        public var ve: Double?, vn: Double?

        public init(x: Double, y: Double, timeMs: Int64, accuracyM: Double, ve: Double? = nil, vn: Double? = nil) {
            (self.x, self.y, self.timeMs, self.accuracyM, self.ve, self.vn) = (x, y, timeMs, accuracyM, ve, vn)
        }
    }
    public struct Anchor: Codable, Sendable, Equatable {
        public var x: Double, y: Double
    }
    public struct OutlierFix: Codable, Sendable, Equatable {
        public var x: Double, y: Double, timeMs: Int64, accuracyM: Double
        /// Whether the fix had a Doppler speed: a run with one waits the
        /// longer recovery window. Rows saved before it was kept read true.
        public var doppler: Bool

        public init(x: Double, y: Double, timeMs: Int64, accuracyM: Double, doppler: Bool = true) {
            (self.x, self.y, self.timeMs, self.accuracyM, self.doppler) = (x, y, timeMs, accuracyM, doppler)
        }

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            self.init(x: try c.decode(Double.self, forKey: .x), y: try c.decode(Double.self, forKey: .y),
                      timeMs: try c.decode(Int64.self, forKey: .timeMs), accuracyM: try c.decode(Double.self, forKey: .accuracyM),
                      doppler: try c.decodeIfPresent(Bool.self, forKey: .doppler) ?? true)
        }
    }
    public struct Position: Codable, Sendable, Equatable {
        public var latitude: Double, longitude: Double
    }
    public struct StandingRun: Codable, Sendable, Equatable {
        public var count: Int, sinceMs: Int64
    }
}

/// The Kalman filter's part. Written by `start`, the innovation gate and
/// the update, a parked device's drift, a departure and a recovery; the
/// calibration also by every new fix (`FilterCore.calibrated`).
public struct KalmanState: Codable, Sendable, Equatable {
    public enum Phase: Codable, Sendable, Equatable {
        /// No fix taken yet: the next one starts the filter, in a frame around itself.
        case notStarted
        /// Dropped with the timeline of a clock that ran ahead: the next fix
        /// starts the filter again, in the frame the published points are in.
        case lost(frame: LocalFrame)
        case tracking(filter: Track)
    }

    /// A running filter: both axes in a local frame, at the time of its last update.
    public struct Track: Codable, Sendable, Equatable {
        public var frame: LocalFrame
        public var east: AxisFilter, north: AxisFilter
        /// Time of the estimate (ms).
        public var timeMs: Int64
    }

    public var phase = Phase.notStarted
    /// How much the fixes' errors persist (fixes without Doppler; a device with it never starts one).
    public var noise: NoiseCorrelation?
    /// Recent outliers, to recover when the filter (not the fixes) is wrong.
    public var outliers: [DeviceFilterState.OutlierFix] = []
    /// What the device's accuracy is worth when it says nothing (learned by the innovation gate).
    public var calibration = AccuracyCalibration()

    public init() {}

    private enum CodingKeys: String, CodingKey { case phase, noise, outliers, calibration }

    /// States saved as JSON by earlier releases have no calibration: nothing learned yet.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        phase = try c.decode(Phase.self, forKey: .phase)
        noise = try c.decodeIfPresent(NoiseCorrelation.self, forKey: .noise)
        outliers = try c.decode([DeviceFilterState.OutlierFix].self, forKey: .outliers)
        calibration = try c.decodeIfPresent(AccuracyCalibration.self, forKey: .calibration) ?? AccuracyCalibration()
    }

    /// How many times its reported accuracy the device's next fix is judged with (`AccuracyCalibration`).
    public var accuracyScale: Double { calibration.scale(inflation: noise?.inflation ?? 1) }

    /// The running filter, if there is one.
    public var track: Track? {
        if case .tracking(let track) = phase { return track }
        return nil
    }

    /// The frame the published points are in, while the filter runs or since it was lost.
    public var frame: LocalFrame? {
        switch phase {
        case .notStarted: nil
        case .lost(let frame): frame
        case .tracking(let track): track.frame
        }
    }

    /// The filter dropped (its estimate is wrong, not the fixes): the next fix restarts it in the same frame.
    mutating func drop() {
        if let frame { phase = .lost(frame: frame) }
        outliers.removeAll()
    }

    /// From standstill the speed is unknown: at least `variance` (m²/s²) on each axis.
    mutating func loosenVelocity(to variance: Double) {
        guard case .tracking(var track) = phase else { return }
        track.east.vv = max(track.east.vv, variance)
        track.north.vv = max(track.north.vv, variance)
        phase = .tracking(filter: track)
    }
}

/// What the fixes before this one said. Written by the ordering gate, and by
/// the look-ahead when it skips a held fix as a jump.
public struct OrderingState: Codable, Sendable, Equatable {
    /// Newest fix time judged (ms).
    public var newestMs: Int64?
    /// How long after the fix before it the newest assessed fix came (ms;
    /// a held fix then skipped as a jump leaves it as it was): how often the
    /// device reports, for how long the smoothing lag waits on silence and
    /// whether a fix after a gap waits for the next.
    public var reportIntervalMs: Int64?
    /// When the newest fix reached the gateway (ms), if known: a fix stamped
    /// well after it arrived came from a clock running ahead.
    public var newestReceivedMs: Int64?
    /// The previous fix's position, to spot a cached fix re-reported.
    public var previousPosition: DeviceFilterState.Position?

    public init() {}
}

/// Whether the device is parked. Written by the stop gates and the motion service's state.
public struct StopState: Codable, Sendable, Equatable {
    /// Motion state from the motion service, if it publishes one.
    public var externalMotion: MotionState?
    /// When the filter itself last saw the device leave a stop (fix time):
    /// a `stationary` from the motion service decided before it is stale.
    public var departedMs: Int64?
    /// Where the device is parked, if it is.
    public var anchor: DeviceFilterState.Anchor?
    /// Consecutive fixes beyond the parked radius.
    public var leavingCount = 0
    /// Recent movement, for stop detection without Doppler speed.
    public var trend = TrendWindows()
    /// The current run of fixes whose Doppler speed says "standing still".
    public var standingRun: DeviceFilterState.StandingRun?
    /// When the last "still here" point was decided (fix time), which may
    /// be before it is published.
    public var standingMs: Int64?

    public init() {}
}

/// The look-ahead's part (`LookAhead.swift`).
public struct LookAheadState: Codable, Sendable, Equatable {
    /// Fixes held back until the ones after them tell a jump from a turn,
    /// oldest first: the first is undecided, those after it came while it was.
    public var held: [FilterInput] = []
    /// The way as a steady vehicle would have driven it (see `SteadyTrack`).
    public var steady: SteadyTrack?

    public init() {}
}

/// The smoother's part (`Smoothing.swift`).
public struct SmoothingState: Codable, Sendable, Equatable {
    /// Fixes without Doppler judged but not yet published: they come out
    /// smoothed, the lag (`lagMs`) later.
    public var waiting: [Lagging] = []

    public init() {}
}

/// What has been published. Written when a point goes out.
public struct OdometerState: Codable, Sendable, Equatable {
    /// The last published point, in the filter's frame.
    public var lastPoint: DeviceFilterState.AcceptedPoint?
    /// The way counted so far (m).
    public var meters = 0.0

    public init() {}
}

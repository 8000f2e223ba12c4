import FoundationEssentials
import Model
import Runtime
import TrackCore

/// `getSummary {fromMs, toMs}`: the figures a dispatcher reads at the end of a day.
struct Summary: Encodable {
    var fromMs: Int64
    var toMs: Int64
    /// Along the built track's moving segments (gaps excluded).
    var observedDistanceM: Double
    /// The filter's odometer over the period (gaps' straight lines included).
    var odometerDistanceM: Double
    var movingSec: Double
    var stoppedSec: Double
    var stops: Int
    /// Runs of moving between stops (a gap inside a run does not split it).
    var trips: Int
    var maxSpeedMps: Double
    var firstFixMs: Int64?
    var lastFixMs: Int64?
    var points: Int

    struct Args: Decodable {
        var fromMs: Int
        var toMs: Int
        private enum Key: String, CodingKey { case fromMs, toMs }
        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: Key.self)
            guard let from = try c.decodeWholeNumberIfPresent(forKey: .fromMs), let to = try c.decodeWholeNumberIfPresent(forKey: .toMs) else {
                throw DecodingError.keyNotFound(Key.fromMs, .init(codingPath: c.codingPath, debugDescription: "fromMs and toMs are both required"))
            }
            fromMs = from; toMs = to
        }
    }

    /// At most a year per request: a summary reads every point of the period.
    static let maxPeriodMs: Int64 = 366 * 86_400_000

    static func of(_ command: IncomingCommand, _ query: QueryContext) throws -> Summary {
        let args = try command.arguments(Args.self)
        let from = Int64(args.fromMs), to = Int64(args.toMs)
        guard from <= to, to - from <= maxPeriodMs else {
            throw CommandError(.badInput, "fromMs…toMs must be a period of at most 366 days, fromMs first; got \(from)…\(to)")
        }
        let points = try TrackStore.period(query.db, device: query.device, fromMs: from, toMs: to)
        let track = TrackBuilder().build(points, device: query.device, sessionID: nil)
        var trips = 0, inTrip = false
        for segment in track.segments {
            switch segment.kind {
            case .moving: if !inTrip { trips += 1; inTrip = true }
            case .stop: inTrip = false
            case .gap: break
            }
        }
        let odometers = points.map(\.point.odometerM)
        let s = track.statistics
        return Summary(fromMs: from, toMs: to, observedDistanceM: s.observedDistanceM,
                       odometerDistanceM: max(0, (odometers.max() ?? 0) - (odometers.min() ?? 0)), movingSec: s.movingSec,
                       stoppedSec: s.stoppedSec, stops: s.stops, trips: trips, maxSpeedMps: s.maxSpeedMps,
                       firstFixMs: points.first?.point.timeMs, lastFixMs: points.last?.point.timeMs, points: points.count)
    }
}

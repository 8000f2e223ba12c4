import FoundationEssentials
import Model

/// Road snapping through an OSRM server the operator runs (`roadSnapUrl`;
/// no default, nothing leaves the machine unless configured): each moving
/// segment's line goes to OSRM's `match` service and comes back on the road
/// network. If any request fails, the track stays unsnapped and says why.
public struct RoadSnapper: Sendable {
    public var baseURL: String
    public var profile: String
    /// OSRM's default limit of coordinates per request.
    public static let maxCoordinates = 100

    public init(baseURL: String, profile: String = "driving") {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.profile = profile
    }

    /// The `match` requests for a line: chunks of at most 100 vertices, each
    /// starting where the last ended so the pieces join.
    public func requests(for vertices: [Vertex]) -> [String] {
        guard vertices.count > 1 else { return [] }
        var urls: [String] = [], start = 0
        while start < vertices.count - 1 {
            let chunk = vertices[start..<min(vertices.count, start + Self.maxCoordinates)]
            let coordinates = chunk.map { "\($0.longitude.fixed(6)),\($0.latitude.fixed(6))" }.joined(separator: ";")
            let timestamps = chunk.map { String($0.timeMs / 1000) }.joined(separator: ";")
            urls.append("\(baseURL)/match/v1/\(profile)/\(coordinates)?timestamps=\(timestamps)&geometries=geojson&overview=full&gaps=ignore")
            start += Self.maxCoordinates - 1
        }
        return urls
    }

    /// The matched line of one response, `[lon, lat]` pairs, or why there is none.
    public static func line(from data: Data) throws(SnapError) -> [[Double]] {
        let answer: MatchAnswer
        do { answer = try JSONCoding.decoder.decode(MatchAnswer.self, from: data) } catch {
            throw SnapError(JSONSyntax.firstProblem(in: data) == nil ? "the answer is not OSRM's (\(DecodingErrorText.describe(any: error)))"
                                                                     : "the answer is not JSON")
        }
        guard answer.code == "Ok" else { throw SnapError("OSRM said \(answer.code ?? "nothing"): \(answer.message ?? "")") }
        let coordinates = (answer.matchings ?? []).flatMap { $0.geometry?.coordinates ?? [] }
        guard coordinates.count >= 2 else { throw SnapError("OSRM matched no line") }
        return coordinates
    }

    /// What is read of OSRM's `match` answer (GeoJSON geometries).
    private struct MatchAnswer: Decodable {
        struct Matching: Decodable { var geometry: Geometry? }
        struct Geometry: Decodable { var coordinates: [[Double]]? }
        var code: String?
        var message: String?
        var matchings: [Matching]?
    }

    /// The track with its moving segments on the road, or, when any request
    /// fails, unchanged with the reason in `diagnostics`.
    public func snap(_ track: Track, fetch: (String) -> Result<Data, SnapError>) -> Track {
        var snapped = track
        do {
            for (i, segment) in track.segments.enumerated() where segment.kind == .moving && segment.vertices.count > 1 {
                var line: [[Double]] = []
                for url in requests(for: segment.vertices) {
                    let piece = try Self.line(from: fetch(url).get())
                    line += line.isEmpty ? piece : Array(piece.dropFirst())
                }
                snapped.segments[i] = Self.replacing(segment, with: line)
            }
        } catch {
            var unsnapped = track
            unsnapped.diagnostics = (track.diagnostics ?? []) + ["roadSnap: \(error.reason); the track is not snapped"]
            return unsnapped
        }
        snapped.statistics.observedDistanceM = snapped.segments.filter { $0.kind == .moving }.reduce(0) { $0 + $1.distanceM }
        snapped.roadSnapped = true
        return snapped
    }

    /// The segment along the matched line; times spread by distance between its own start and end.
    static func replacing(_ segment: Segment, with line: [[Double]]) -> Segment {
        var lengths = [0.0]
        for (a, b) in zip(line, line.dropFirst()) { lengths.append(lengths.last! + Geodesy.distance(a[1], a[0], b[1], b[0])) }
        let total = max(lengths.last ?? 0, 1e-9), span = Double(segment.endMs - segment.startMs)
        var s = segment
        s.vertices = zip(line, lengths).map { p, d in Vertex(latitude: p[1], longitude: p[0], timeMs: segment.startMs + Int64(span * d / total)) }
        s.distanceM = lengths.last ?? 0
        return s
    }
}

public struct SnapError: Error, Sendable {
    public let reason: String
    public init(_ reason: String) { self.reason = reason }
}

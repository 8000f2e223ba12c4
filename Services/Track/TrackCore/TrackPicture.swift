import FoundationEssentials
import Glibc
import Model

/// A built track as an SVG picture: moving segments coloured by speed band,
/// stops as circles sized by duration, gaps dashed grey, arrows, a scale
/// bar, start and end marked. Pure; no map tiles (it works offline).
public enum TrackPicture {
    public static let colours: [SpeedBand: String] = [.walk: "#2a9d8f", .slow: "#457b9d", .medium: "#f4a261", .fast: "#e63946"]

    public static func svg(_ track: Track, width: Double = 1000) -> String {
        let all = track.segments.flatMap(\.vertices)
        guard let first = all.first else {
            return ##"<svg xmlns="http://www.w3.org/2000/svg" width="400" height="80"><text x="20" y="45">no points</text></svg>"##
        }
        let frame = LocalFrame(originLat: first.latitude, originLon: first.longitude)
        let xy = all.map { frame.toLocal(lat: $0.latitude, lon: $0.longitude) }
        let minX = xy.map(\.x).min()!, maxX = xy.map(\.x).max()!, minY = xy.map(\.y).min()!, maxY = xy.map(\.y).max()!
        let margin = 60.0, legend = 70.0
        let span = max(maxX - minX, maxY - minY, 50)
        let scale = (width - 2 * margin) / span
        let height = max(300, (maxY - minY) * scale + 2 * margin + legend)
        func point(_ v: Vertex) -> (Double, Double) {
            let (x, y) = frame.toLocal(lat: v.latitude, lon: v.longitude)
            return (margin + (x - minX) * scale, height - legend - margin - (y - minY) * scale)
        }
        /// A coordinate to a tenth of a pixel.
        func c(_ v: Double) -> String { v.fixed(1) }
        func pair(_ p: (Double, Double)) -> String { "\(c(p.0)),\(c(p.1))" }
        var body = ""
        for segment in track.segments where segment.kind == .gap {
            body += ##"<polyline points="\##(segment.vertices.map { pair(point($0)) }.joined(separator: " "))" fill="none" stroke="#999" stroke-width="3" stroke-dasharray="10 8"/>"## + "\n"
        }
        for segment in track.segments where segment.kind == .moving {
            let colour = colours[segment.speedBand ?? .slow] ?? "#457b9d"
            body += ##"<polyline points="\##(segment.vertices.map { pair(point($0)) }.joined(separator: " "))" fill="none" stroke="\##(colour)" stroke-width="5" stroke-linejoin="round" stroke-linecap="round"/>"## + "\n"
            for arrow in segment.arrows ?? [] {
                let (x, y) = point(Vertex(latitude: arrow.latitude, longitude: arrow.longitude, timeMs: 0))
                body += ##"<path d="M -7 6 L 0 -8 L 7 6 Z" fill="#1d3557" transform="translate(\##(c(x)) \##(c(y))) rotate(\##(arrow.bearingDeg.fixed(0)))"/>"## + "\n"
            }
        }
        for segment in track.segments where segment.kind == .stop {
            guard let stop = segment.stop else { continue }
            let (x, y) = point(Vertex(latitude: stop.latitude, longitude: stop.longitude, timeMs: 0))
            let r = 8 + 3 * (stop.durationSec / 60).squareRoot()
            body += ##"<circle cx="\##(c(x))" cy="\##(c(y))" r="\##(c(r))" fill="#6a4c93" fill-opacity="0.35" stroke="#6a4c93" stroke-width="2"/>"## + "\n"
            body += ##"<text x="\##(c(x + r + 4))" y="\##(c(y + 5))" font-size="14" fill="#3c2a54">\##(duration(stop.durationSec))</text>"## + "\n"
        }
        if let start = track.segments.first?.vertices.first, let end = track.segments.last?.vertices.last {
            let (sx, sy) = point(start), (ex, ey) = point(end)
            body += ##"<circle cx="\##(c(sx))" cy="\##(c(sy))" r="10" fill="#2b9348" stroke="white" stroke-width="2"/><text x="\##(c(sx))" y="\##(c(sy + 4))" font-size="12" fill="white" text-anchor="middle" font-weight="bold">S</text>"## + "\n"
            body += ##"<rect x="\##(c(ex - 9))" y="\##(c(ey - 9))" width="18" height="18" fill="#d00000" stroke="white" stroke-width="2"/><text x="\##(c(ex))" y="\##(c(ey + 4))" font-size="12" fill="white" text-anchor="middle" font-weight="bold">E</text>"## + "\n"
        }
        // Scale bar: the round length nearest a fifth of the width.
        let target = (width - 2 * margin) / 5 / scale
        let magnitude = pow(10, (log10(target)).rounded(.down))
        let metres = [1, 2, 5, 10].map { $0 * magnitude }.min { abs($0 - target) < abs($1 - target) } ?? magnitude
        let barY = height - 25
        let length = metres >= 1000 ? "\((metres / 1000).fixed(0)) km" : "\(metres.fixed(0)) m"
        body += ##"<line x1="\##(c(margin))" y1="\##(c(barY))" x2="\##(c(margin + metres * scale))" y2="\##(c(barY))" stroke="black" stroke-width="3"/><text x="\##(c(margin))" y="\##(c(barY - 8))" font-size="13">\##(length)</text>"## + "\n"
        // Legend: the bands, a stop, a gap.
        var x = margin + metres * scale + 40
        for band in SpeedBand.allCases {
            body += ##"<line x1="\##(x)" y1="\##(barY)" x2="\##(x + 30)" y2="\##(barY)" stroke="\##(colours[band]!)" stroke-width="5"/><text x="\##(x + 36)" y="\##(barY + 5)" font-size="13">\##(band.rawValue)</text>"## + "\n"
            x += 100
        }
        body += ##"<line x1="\##(x)" y1="\##(barY)" x2="\##(x + 30)" y2="\##(barY)" stroke="#999" stroke-width="3" stroke-dasharray="10 8"/><text x="\##(x + 36)" y="\##(barY + 5)" font-size="13">gap</text>"## + "\n"
        let s = track.statistics
        func count(_ n: Int, _ noun: String) -> String { "\(n) \(noun)\(n == 1 ? "" : "s")" }
        let title = "\(track.device.rawValue) \(track.sessionID ?? "") — \((s.observedDistanceM / 1000).fixed(1)) km observed, "
            + "\(count(s.stops, "stop")), \(count(s.gaps, "gap")), moving \(duration(s.movingSec))"
        return """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" viewBox="0 0 \(Int(width)) \(Int(height))" font-family="sans-serif">
            <rect width="100%" height="100%" fill="#f6f5f0"/>
            <text x="\(Int(margin))" y="30" font-size="16">\(escaped(title))</text>
            \(body)</svg>

            """
    }

    static func duration(_ seconds: Double) -> String {
        guard seconds >= 3600 else { return "\((seconds / 60).rounded().fixed(0)) min" }
        let minutes = (seconds.truncatingRemainder(dividingBy: 3600) / 60).rounded(.down)
        return "\((seconds / 3600).rounded(.down).fixed(0)) h \(minutes < 10 ? "0" : "")\(minutes.fixed(0)) min"
    }

    /// Text safe inside XML (the picture's SVG, the GPX export).
    public static func escaped(_ s: String) -> String {
        var text = ""
        text.reserveCapacity(s.utf8.count)
        for scalar in s.unicodeScalars {
            switch scalar {
            case "&": text += "&amp;"
            case "<": text += "&lt;"
            case ">": text += "&gt;"
            case "\"": text += "&quot;"
            default: text.unicodeScalars.append(scalar)
            }
        }
        return text
    }
}

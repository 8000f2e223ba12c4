import Foundation
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
        func pair(_ p: (Double, Double)) -> String { String(format: "%.1f,%.1f", p.0, p.1) }
        var body = ""
        for segment in track.segments where segment.kind == .gap {
            body += ##"<polyline points="\##(segment.vertices.map { pair(point($0)) }.joined(separator: " "))" fill="none" stroke="#999" stroke-width="3" stroke-dasharray="10 8"/>"## + "\n"
        }
        for segment in track.segments where segment.kind == .moving {
            let colour = colours[segment.speedBand ?? .slow] ?? "#457b9d"
            body += ##"<polyline points="\##(segment.vertices.map { pair(point($0)) }.joined(separator: " "))" fill="none" stroke="\##(colour)" stroke-width="5" stroke-linejoin="round" stroke-linecap="round"/>"## + "\n"
            for arrow in segment.arrows ?? [] {
                let (x, y) = point(Vertex(latitude: arrow.latitude, longitude: arrow.longitude, timeMs: 0))
                body += String(format: ##"<path d="M -7 6 L 0 -8 L 7 6 Z" fill="#1d3557" transform="translate(%.1f %.1f) rotate(%.0f)"/>"##, x, y, arrow.bearingDeg) + "\n"
            }
        }
        for segment in track.segments where segment.kind == .stop {
            guard let stop = segment.stop else { continue }
            let (x, y) = point(Vertex(latitude: stop.latitude, longitude: stop.longitude, timeMs: 0))
            let r = 8 + 3 * (stop.durationSec / 60).squareRoot()
            body += String(format: ##"<circle cx="%.1f" cy="%.1f" r="%.1f" fill="#6a4c93" fill-opacity="0.35" stroke="#6a4c93" stroke-width="2"/>"##, x, y, r) + "\n"
            body += String(format: ##"<text x="%.1f" y="%.1f" font-size="14" fill="#3c2a54">%@</text>"##, x + r + 4, y + 5, duration(stop.durationSec) as NSString) + "\n"
        }
        if let start = track.segments.first?.vertices.first, let end = track.segments.last?.vertices.last {
            let (sx, sy) = point(start), (ex, ey) = point(end)
            body += String(format: ##"<circle cx="%.1f" cy="%.1f" r="10" fill="#2b9348" stroke="white" stroke-width="2"/><text x="%.1f" y="%.1f" font-size="12" fill="white" text-anchor="middle" font-weight="bold">S</text>"##, sx, sy, sx, sy + 4) + "\n"
            body += String(format: ##"<rect x="%.1f" y="%.1f" width="18" height="18" fill="#d00000" stroke="white" stroke-width="2"/><text x="%.1f" y="%.1f" font-size="12" fill="white" text-anchor="middle" font-weight="bold">E</text>"##, ex - 9, ey - 9, ex, ey + 4) + "\n"
        }
        // Scale bar: the round length nearest a fifth of the width.
        let target = (width - 2 * margin) / 5 / scale
        let magnitude = pow(10, (log10(target)).rounded(.down))
        let metres = [1, 2, 5, 10].map { $0 * magnitude }.min { abs($0 - target) < abs($1 - target) } ?? magnitude
        let barY = height - 25
        body += String(format: ##"<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="3"/><text x="%.1f" y="%.1f" font-size="13">%@</text>"##,
                       margin, barY, margin + metres * scale, barY, margin, barY - 8, (metres >= 1000 ? String(format: "%.0f km", metres / 1000) : String(format: "%.0f m", metres)) as NSString) + "\n"
        // Legend: the bands, a stop, a gap.
        var x = margin + metres * scale + 40
        for band in SpeedBand.allCases {
            body += ##"<line x1="\##(x)" y1="\##(barY)" x2="\##(x + 30)" y2="\##(barY)" stroke="\##(colours[band]!)" stroke-width="5"/><text x="\##(x + 36)" y="\##(barY + 5)" font-size="13">\##(band.rawValue)</text>"## + "\n"
            x += 100
        }
        body += ##"<line x1="\##(x)" y1="\##(barY)" x2="\##(x + 30)" y2="\##(barY)" stroke="#999" stroke-width="3" stroke-dasharray="10 8"/><text x="\##(x + 36)" y="\##(barY + 5)" font-size="13">gap</text>"## + "\n"
        let s = track.statistics
        func count(_ n: Int, _ noun: String) -> String { "\(n) \(noun)\(n == 1 ? "" : "s")" }
        let title = String(format: "%@ %@ — %.1f km observed, %@, %@, moving %@", track.device.rawValue as NSString,
                           (track.sessionID ?? "") as NSString, s.observedDistanceM / 1000, count(s.stops, "stop") as NSString,
                           count(s.gaps, "gap") as NSString, duration(s.movingSec) as NSString)
        return """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" viewBox="0 0 \(Int(width)) \(Int(height))" font-family="sans-serif">
            <rect width="100%" height="100%" fill="#f6f5f0"/>
            <text x="\(Int(margin))" y="30" font-size="16">\(escaped(title))</text>
            \(body)</svg>

            """
    }

    static func duration(_ seconds: Double) -> String {
        seconds >= 3600 ? String(format: "%.0f h %02.0f min", (seconds / 3600).rounded(.down), (seconds.truncatingRemainder(dividingBy: 3600) / 60).rounded(.down))
            : String(format: "%.0f min", (seconds / 60).rounded())
    }

    /// Text safe inside XML (the picture's SVG, the GPX export).
    public static func escaped(_ s: String) -> String {
        s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
            .replacingOccurrences(of: "\"", with: "&quot;")
    }
}

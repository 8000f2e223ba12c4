import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import Model

/// One `<trk>` of a GPX file, as the reader found it.
struct GPXTrack: Equatable {
    /// Its place among the file's `<trk>`s, from 0.
    var index: Int
    var name: String?
    var type: String?
    /// How many `<trkseg>`s it has.
    var segments = 0
}

/// Reads GPX 1.0 and 1.1 as the tools write them. Elements are matched by
/// their local name, so any namespace prefix (`g:trkpt`) or default namespace
/// reads the same. Only `<trkpt>`s are fixes: `<wpt>`s (a stop in the project's
/// own export, a place in most files) and `<rtept>`s (a planned route) are counted
/// and left out. A `<trkpt>` gives `t` from `<time>` (an xsd:dateTime; without a
/// zone it is UTC and counted in `zoneless`), `alt` from `<ele>`, `acc` from
/// `<hdop>` × 5 m or 10 m, and `speed` (m/s) and `course` (degrees) from GPX 1.0's
/// `<speed>`/`<course>` or, failing those, from an extension's element of the same
/// name (Garmin's `gpxtpx:TrackPointExtension`, Cluetrust's `gpxdata:`); an
/// unknown (negative) or impossible value is left out.
final class GPXReader: NSObject, XMLParserDelegate {
    struct Counts: Equatable {
        var trackPoints = 0, timeless = 0, zoneless = 0, waypoints = 0, routePoints = 0
    }
    private(set) var fixes: [(fix: DeviceFix, track: Int, segment: Int)] = []
    private(set) var tracks: [GPXTrack] = []
    private(set) var counts = Counts()
    private(set) var root: String?
    private(set) var problem: String?
    private(set) var firstTimelessLine: Int?
    private(set) var zonelessExample: String?

    private struct Point {
        var lat: Double, lon: Double
        var time: Double?, elevation: Double?, hdop: Double?
        var speed: Double?, course: Double?, extensionSpeed: Double?, extensionCourse: Double?
    }
    private var point: Point?
    private var pointLine = 0
    private var stack: [String] = []
    private var segment = -1
    private var text = ""

    static func localName(_ name: String) -> String {
        name.lastIndex(of: ":").map { String(name[name.index(after: $0)...]) } ?? name
    }

    private func fail(_ parser: XMLParser, _ message: String) {
        problem = problem ?? "line \(parser.lineNumber): \(message)"
        parser.abortParsing()
    }

    func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?,
                attributes: [String: String] = [:]) {
        let local = Self.localName(name)
        if root == nil { root = local }
        let inTrack = stack.contains("trk")
        stack.append(local)
        text = ""
        switch local {
        case "trk" where stack.count == 2:
            tracks.append(GPXTrack(index: tracks.count))
            segment = -1
        case "trkseg" where inTrack:
            segment += 1
            tracks[tracks.count - 1].segments += 1
        case "trkpt" where inTrack:
            counts.trackPoints += 1
            let lat = attributes["lat"].flatMap { Double($0.trimmingCharacters(in: .whitespaces)) }
            let lon = attributes["lon"].flatMap { Double($0.trimmingCharacters(in: .whitespaces)) }
            guard let lat, let lon, (-90...90).contains(lat), (-180...180).contains(lon) else {
                fail(parser, "a <trkpt> without a numeric lat (−90…90) and lon (−180…180)")
                return
            }
            point = Point(lat: lat, lon: lon)
            pointLine = parser.lineNumber
            if segment < 0 { segment = 0 }  // a <trkpt> straight in <trk>: not valid GPX, read as one segment
        case "wpt" where stack.count == 2: counts.waypoints += 1
        case "rtept": counts.routePoints += 1
        default: break
        }
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) { text += string }
    func parser(_ parser: XMLParser, foundCDATA CDATABlock: Data) { text += String(decoding: CDATABlock, as: UTF8.self) }

    func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
        let local = Self.localName(name)
        if !stack.isEmpty { stack.removeLast() }
        let parent = stack.last
        let value = text.trimmingCharacters(in: .whitespacesAndNewlines)
        text = ""
        if var p = point {
            let direct = parent == "trkpt"
            switch local {
            case "time" where direct:
                guard let time = XSDDateTime.parse(value) else {
                    fail(parser, "the <time> '\(value.prefix(40))' is not an xsd:dateTime (such as 2024-05-01T10:00:00Z)")
                    return
                }
                p.time = time.seconds
                if !time.zoned {
                    counts.zoneless += 1
                    zonelessExample = zonelessExample ?? value
                }
            case "ele" where direct: p.elevation = Double(value)
            case "hdop" where direct: p.hdop = Double(value)
            case "speed": if direct { p.speed = Double(value) } else { p.extensionSpeed = p.extensionSpeed ?? Double(value) }
            case "course": if direct { p.course = Double(value) } else { p.extensionCourse = p.extensionCourse ?? Double(value) }
            case "trkpt":
                point = nil
                guard let time = p.time else {
                    counts.timeless += 1
                    firstTimelessLine = firstTimelessLine ?? pointLine
                    return
                }
                let speed = (p.speed ?? p.extensionSpeed).flatMap { (0...1_000).contains($0) ? $0 : nil }
                let course = (p.course ?? p.extensionCourse).flatMap { (0...360).contains($0) ? $0 : nil }
                let acc = p.hdop.flatMap { $0 > 0 && $0.isFinite ? $0 * 5 : nil } ?? 10
                fixes.append((DeviceFix(t: time, lat: p.lat, lon: p.lon, acc: acc, speed: speed, course: course,
                                        alt: p.elevation.flatMap { $0.isFinite ? $0 : nil }),
                               tracks.count - 1, segment))
                return
            default: break
            }
            point = p
            return
        }
        guard parent == "trk", let last = tracks.indices.last, !value.isEmpty else { return }
        switch local {
        case "name": tracks[last].name = value
        case "type": tracks[last].type = value
        default: break
        }
    }
}

/// xsd:dateTime: `[-]YYYY-MM-DDThh:mm:ss[.s…][Z|±hh:mm]`. Without a zone it is
/// read as UTC and `zoned` is false.
enum XSDDateTime {
    static func parse(_ text: String) -> (seconds: Double, zoned: Bool)? {
        var s = Substring(text)
        func number(_ digits: Int, atLeast: Bool = false) -> Int? {
            let run = s.prefix { $0.isASCII && $0.isNumber }
            guard atLeast ? run.count >= digits : run.count >= digits else { return nil }
            let taken = atLeast ? run : run.prefix(digits)
            s = s.dropFirst(taken.count)
            return Int(taken)
        }
        func take(_ c: Character) -> Bool {
            guard s.first == c else { return false }
            s = s.dropFirst()
            return true
        }
        let negative = take("-")
        guard var year = number(4, atLeast: true), take("-"), let month = number(2), take("-"), let day = number(2),
              take("T"), let hour = number(2), take(":"), let minute = number(2), take(":"), let second = number(2) else { return nil }
        if negative { year = -year }
        var fraction = 0.0
        if take(".") {
            let digits = s.prefix { $0.isASCII && $0.isNumber }
            guard !digits.isEmpty, let f = Double("0." + digits) else { return nil }
            fraction = f
            s = s.dropFirst(digits.count)
        }
        var offset = 0, zoned = false
        if take("Z") {
            zoned = true
        } else if let sign = s.first, sign == "+" || sign == "-" {
            s = s.dropFirst()
            guard let h = number(2), take(":"), let m = number(2), h <= 14, m <= 59, h < 14 || m == 0 else { return nil }
            offset = (h * 60 + m) * 60 * (sign == "-" ? -1 : 1)
            zoned = true
        }
        guard s.isEmpty, (1...12).contains(month), day >= 1, day <= daysIn(month, year), minute <= 59, second <= 59 else { return nil }
        // 24:00:00 is the end of the day (xsd), nothing later.
        guard hour <= 23 || (hour == 24 && minute == 0 && second == 0 && fraction == 0) else { return nil }
        let days = daysFromCivil(year, month, day)
        return (Double(days * 86_400 + hour * 3_600 + minute * 60 + second - offset) + fraction, zoned)
    }

    static func daysIn(_ month: Int, _ year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 in the proleptic Gregorian calendar (H. Hinnant's algorithm).
    static func daysFromCivil(_ y0: Int, _ m: Int, _ d: Int) -> Int {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}

extension Recording {
    /// Where each `<trk>` of a GPX recording starts, with the tag a session of
    /// its own would carry: the track's `<name>` (its first 200 characters, the
    /// gateway's limit for a tag), else `gpx track N` (from 1). Segments stay in
    /// their track's. Empty for JSON Lines. Replay does not yet send a `start`
    /// at each (docs/contract.md says what it does today).
    var trackStarts: [(line: Int, tag: String)] {
        var starts: [(line: Int, tag: String)] = []
        for (i, line) in lines.enumerated() {
            guard let track = line.track, i == 0 || lines[i - 1].track != track else { continue }
            let name = tracks.first { $0.index == track }?.name
            starts.append((i, name.map { String($0.prefix(200)) } ?? "gpx track \(track + 1)"))
        }
        return starts
    }
}

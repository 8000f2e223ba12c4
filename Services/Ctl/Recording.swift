import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import Model

/// A recording to replay: JSON Lines in the device fix format, or GPX.
struct Recording {
    struct Line {
        var payload: String
        var t: Double?
        /// A GPX fix's `<trk>` and `<trkseg>` in the file, from 0; nil for JSON Lines.
        var track: Int? = nil
        var segment: Int? = nil
    }
    var lines: [Line]
    /// A GPX file's tracks that gave fixes, in file order (empty for JSON Lines).
    var tracks: [GPXTrack] = []
    /// What the reader assumed (zone-less times read as UTC, waypoints left out):
    /// `load` says each once on stderr.
    var notes: [String] = []

    enum Failure: Error, CustomStringConvertible {
        case unreadable(String)
        case badLine(Int, String)
        case badGPX(String)
        var description: String {
            switch self {
            case .unreadable(let s): "cannot read \(s)"
            case .badLine(let n, let why): "line \(n): \(why)"
            case .badGPX(let why): "GPX: \(why)"
            }
        }
    }

    static func load(path: String) throws -> Recording {
        guard let data = FileManager.default.contents(atPath: path) else { throw Failure.unreadable(path) }
        let firstByte = data.first(where: { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 || $0 == 0xEF || $0 == 0xBB || $0 == 0xBF) })
        if path.lowercased().hasSuffix(".gpx") || firstByte == UInt8(ascii: "<") {
            let recording = try gpx(data)
            for note in recording.notes { FileHandle.standardError.write(Data("trackerctl: \(note)\n".utf8)) }
            return recording
        }
        var lines: [Line] = []
        for text in String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
            if trimmed.isEmpty { continue }
            // Lines go out unchanged; `t` is read only for pacing (a line without one goes out at once).
            let t = (try? JSONCoding.decoder.decode(TimeOnly.self, from: Data(trimmed.utf8)))?.t
            lines.append(Line(payload: trimmed, t: t))
        }
        return Recording(lines: lines)
    }

    /// Shifts every time so the first fix is `nowSec`; lines are re-encoded.
    func rebased(to nowSec: Double) throws -> Recording {
        guard let first = lines.compactMap(\.t).first else { return self }
        let shift = nowSec - first
        var shifted = self
        shifted.lines = try lines.enumerated().map { index, line in
            guard let t = line.t else { return line }
            guard case .object(var object) = try JSONCoding.decoder.decode(JSONValue.self, from: Data(line.payload.utf8)) else {
                throw Failure.badLine(index + 1, "not a JSON object")
            }
            object["t"] = .number(t + shift)
            var moved = line
            moved.payload = JSONCoding.string(JSONValue.object(object))
            moved.t = t + shift
            return moved
        }
        return shifted
    }

    private struct TimeOnly: Decodable { var t: Double? }


    /// A GPX file's `<trk>`s become fixes (see `GPXReader` for what is read
    /// and docs/contract.md for the rules); anything else is an error naming why.
    static func gpx(_ data: Data) throws -> Recording {
        let reader = GPXReader()
        let parser = XMLParser(data: data)
        parser.delegate = reader
        guard parser.parse() else {
            if let problem = reader.problem { throw Failure.badGPX(problem) }
            let line = parser.lineNumber > 0 ? "line \(parser.lineNumber): " : ""
            throw Failure.badGPX(line + (parser.parserError.map { "\($0.localizedDescription)" } ?? "not well-formed XML"))
        }
        if let problem = reader.problem { throw Failure.badGPX(problem) }
        if let root = reader.root, root != "gpx" { throw Failure.badGPX("the root element is <\(root)>, not <gpx>") }
        let counts = reader.counts
        if let line = reader.firstTimelessLine {
            throw Failure.badGPX(counts.timeless == counts.trackPoints
                ? "none of the \(counts.trackPoints) track points (<trkpt>) has a <time>: a replay needs each fix's time"
                : "\(counts.timeless) of the \(counts.trackPoints) track points (<trkpt>) have no <time> (the first on line \(line)): a replay needs each fix's time")
        }
        if reader.fixes.isEmpty {
            if counts.routePoints > 0 {
                throw Failure.badGPX("only a route (<rte>, \(counts.routePoints) points) and no track (<trk>): a route is a planned path, not a recording, and its points are not fixes")
            }
            if counts.waypoints > 0 {
                throw Failure.badGPX("only waypoints (<wpt>, \(counts.waypoints)) and no track (<trk>): waypoints are places, not fixes")
            }
            throw Failure.badGPX("no track point (<trk><trkseg><trkpt>) in the file")
        }
        var notes: [String] = []
        if let example = reader.zonelessExample {
            notes.append("GPX: \(counts.zoneless) of the <time>s have no time zone (e.g. \(example)); read as UTC")
        }
        if counts.waypoints > 0 { notes.append("GPX: \(counts.waypoints) waypoint(s) (<wpt>) left out: waypoints are not fixes") }
        if counts.routePoints > 0 { notes.append("GPX: \(counts.routePoints) route point(s) (<rte>) left out: a route is not a recording") }
        return Recording(lines: reader.fixes.map { Line(payload: JSONCoding.string($0.fix), t: $0.fix.t, track: $0.track, segment: $0.segment) },
                         tracks: reader.tracks, notes: notes)
    }
}

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
    }
    var lines: [Line]

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
        if path.lowercased().hasSuffix(".gpx") || firstByte == UInt8(ascii: "<") { return try gpx(data) }
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
        return Recording(lines: try lines.enumerated().map { index, line in
            guard let t = line.t else { return line }
            guard case .object(var object) = try JSONCoding.decoder.decode(JSONValue.self, from: Data(line.payload.utf8)) else {
                throw Failure.badLine(index + 1, "not a JSON object")
            }
            object["t"] = .number(t + shift)
            return Line(payload: JSONCoding.string(JSONValue.object(object)), t: t + shift)
        })
    }

    private struct TimeOnly: Decodable { var t: Double? }

    /// GPX track points become fixes: `acc` from `<hdop>` × 5 m when present, else 10 m.
    static func gpx(_ data: Data) throws -> Recording {
        let reader = GPXReader()
        let parser = XMLParser(data: data)
        parser.delegate = reader
        guard parser.parse() else {
            throw Failure.badGPX(parser.parserError.map { "\($0.localizedDescription)" } ?? "not well-formed XML")
        }
        if let problem = reader.problem { throw Failure.badGPX(problem) }
        return Recording(lines: reader.fixes.map { Line(payload: JSONCoding.string($0), t: $0.t) })
    }
}

final class GPXReader: NSObject, XMLParserDelegate {
    var fixes: [DeviceFix] = []
    var problem: String?
    private var current: (lat: Double, lon: Double)?
    private var time: Double?
    private var elevation: Double?
    private var hdop: Double?
    private var text = ""
    private let iso = ISO8601DateFormatter()
    private let isoFractional: ISO8601DateFormatter = {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f
    }()

    func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?,
                attributes: [String: String] = [:]) {
        text = ""
        if name == "trkpt" || name == "rtept" || name == "wpt" {
            guard let lat = attributes["lat"].flatMap(Double.init), let lon = attributes["lon"].flatMap(Double.init) else {
                problem = problem ?? "a <\(name)> without numeric lat/lon"
                return
            }
            current = (lat, lon); time = nil; elevation = nil; hdop = nil
        }
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) { text += string }

    func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
        let value = text.trimmingCharacters(in: .whitespacesAndNewlines)
        switch name {
        case "time" where current != nil:
            time = (isoFractional.date(from: value) ?? iso.date(from: value))?.timeIntervalSince1970
        case "ele" where current != nil: elevation = Double(value)
        case "hdop" where current != nil: hdop = Double(value)
        case "trkpt", "rtept", "wpt":
            if let point = current {
                if let time {
                    fixes.append(DeviceFix(t: time, lat: point.lat, lon: point.lon, acc: hdop.map { $0 * 5 } ?? 10, alt: elevation))
                } else {
                    problem = problem ?? "a <\(name)> without <time>"
                }
            }
            current = nil
        default: break
        }
    }
}

import Bus
import Foundation
import Model
import TrackCore

extension Ctl {
    /// `trackerctl render DEVICE --session ID --out FILE.svg [--options JSON]`:
    /// asks the track service for the built track and draws it (a PNG beside
    /// it where `rsvg-convert` is installed).
    static func render(_ args: inout Arguments, _ connection: Connection) async throws {
        let optionsText = args.value("--options")
        let day = try DayArguments(&args, command: "render", file: "FILE.svg")
        try args.finish()
        var buildArgs: [String: JSONValue] = ["sessionID": .string(day.sessionID)]
        if let optionsText {
            let options: JSONValue
            do { options = try JSONCoding.decoder.decode(JSONValue.self, from: Data(optionsText.utf8)) } catch {
                throw UsageError("--options is not valid JSON (\(DecodingErrorText.describe(any: error)))")
            }
            guard case .object = options else { throw UsageError("--options must be a JSON object") }
            buildArgs["options"] = options
        }
        let client = try await connection.connect(name: "render")
        let result = try await Asker(client: client, connection: connection, device: day.device, timeout: day.timeout)("buildTrack", buildArgs)
        await client.disconnect()
        let track = try result.decode(Track.self)
        let out = day.out
        try TrackPicture.svg(track).write(toFile: out, atomically: true, encoding: .utf8)
        print("wrote \(out)")
        let png = (out.hasSuffix(".svg") ? String(out.dropLast(4)) : out) + ".png"
        for tool in ["/usr/bin/rsvg-convert", "/usr/local/bin/rsvg-convert"] where FileManager.default.isExecutableFile(atPath: tool) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: tool)
            process.arguments = ["-o", png, out]
            try process.run()
            process.waitUntilExit()
            if process.terminationStatus == 0 { print("wrote \(png)") }
            break
        }
    }
}

/// `DEVICE --session ID --out FILE [--timeout S]`: a device's day to fetch
/// and write (`render`, `view`). A command reads its own options first.
struct DayArguments {
    let device: DeviceID
    let sessionID: String
    let out: String
    let timeout: Double

    init(_ args: inout Arguments, command: String, file: String) throws {
        timeout = try args.double("--timeout") ?? 30
        guard let sessionID = args.value("--session") else { throw UsageError("\(command) needs --session ID") }
        guard let out = args.value("--out") else { throw UsageError("\(command) needs --out \(file)") }
        guard let text = args.positional(), let device = DeviceID(text) else { throw UsageError("\(command) needs a valid DEVICE") }
        self.sessionID = sessionID; self.out = out; self.device = device
    }
}

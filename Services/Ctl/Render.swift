import Bus
import Foundation
import Model
import TrackCore

extension Ctl {
    /// `trackerctl render DEVICE --session ID --out FILE.svg [--options JSON]`:
    /// asks the track service for the built track and draws it (a PNG beside
    /// it where `rsvg-convert` is installed).
    static func render(_ args: inout Arguments, _ connection: Connection) async throws {
        let timeout = try args.double("--timeout") ?? 30
        guard let sessionID = args.value("--session") else { throw UsageError("render needs --session ID") }
        guard let out = args.value("--out") else { throw UsageError("render needs --out FILE.svg") }
        let optionsText = args.value("--options")
        guard let deviceText = args.positional(), let device = DeviceID(deviceText) else { throw UsageError("render needs a valid DEVICE") }
        try args.finish()
        var buildArgs: [String: JSONValue] = ["sessionID": .string(sessionID)]
        if let optionsText {
            guard let options = try? JSONCoding.decoder.decode(JSONValue.self, from: Data(optionsText.utf8)) else {
                throw UsageError("--options must be a JSON object")
            }
            buildArgs["options"] = options
        }
        let client = try await connection.connect(name: "render")
        let result = try await Asker(client: client, connection: connection, device: device, timeout: timeout)("buildTrack", buildArgs)
        await client.disconnect()
        let track = try result.decode(Track.self)
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

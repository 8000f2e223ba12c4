import Foundation
import TestSupport
import Testing

/// libFoundation, its ICU and internationalization take about 6 MB resident
/// in each process that loads them. The five services import only
/// FoundationEssentials (the track and the uploader call out through libcurl
/// itself): an `import Foundation` anywhere in their modules would bring it
/// all back.
@Suite struct SharedLibrariesTests {
    static let withoutFoundation = ["tracker-gateway", "tracker-filter", "tracker-motion", "tracker-track", "tracker-uploader"]

    @Test(arguments: withoutFoundation)
    func aServiceLoadsNoFoundationBeyondItsEssentials(_ executable: String) throws {
        let path = ServiceHarness.binaryDirectory.appendingPathComponent(executable).path
        let ldd = Process()
        ldd.executableURL = URL(fileURLWithPath: "/usr/bin/ldd")
        ldd.arguments = [path]
        let output = Pipe()
        ldd.standardOutput = output
        try ldd.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        ldd.waitUntilExit()
        #expect(ldd.terminationStatus == 0, "ldd \(path)")
        let libraries = text.split(separator: "\n").compactMap { $0.split(whereSeparator: \.isWhitespace).first.map(String.init) }
        #expect(libraries.contains("libFoundationEssentials.so"))
        for heavy in ["libFoundation.so", "libFoundationNetworking.so", "libFoundationXML.so", "libFoundationInternationalization.so", "lib_FoundationICU.so"] {
            #expect(!libraries.contains(heavy), "\(executable) loads \(heavy)")
        }
    }
}

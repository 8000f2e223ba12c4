import Foundation
import Model
@testable import Uploader
import Testing

/// The uploader's row, empty, in the binary form every service's row takes:
/// written as two bytes, the `{}` of earlier releases still read, damage thrown.
@Suite struct UploaderStoredRowTests {
    @Test func theRowIsTheBinaryFormsHeaderAlone() throws {
        let stored = UploaderService.Row().stored
        #expect(stored == [0xF1, 1])
        _ = try UploaderService.Row.restored(from: Data(stored), using: JSONDecoder())
    }

    @Test func aRowOfAnEarlierReleaseStillReads() throws {
        _ = try UploaderService.Row.restored(from: Data("{}".utf8), using: JSONDecoder())
    }

    @Test func damageIsThrown() {
        #expect(throws: (any Error).self) { try UploaderService.Row.restored(from: Data([0xF1, 1, 0]), using: JSONDecoder()) }
        #expect(throws: (any Error).self) { try UploaderService.Row.restored(from: Data([0xF1, 2]), using: JSONDecoder()) }
        #expect(throws: (any Error).self) { try UploaderService.Row.restored(from: Data([0xF1]), using: JSONDecoder()) }
    }
}

import Foundation
import Model

/// A device's input watermarks as stored beside its row: a compact binary
/// form, written for every device a batch touched and read whenever an
/// evicted device comes back. As JSON (the form of earlier releases, still
/// read) they took a tenth of a consumer's time at 10,000 devices.
///
/// Layout: the magic byte, the format version, the number of inputs, then
/// per input its name, its epoch (optional) and its seq.
enum StoredInputs {
    /// First byte of the binary form; JSON starts with `{`.
    static let magic: UInt8 = 0xF1
    static let version: UInt64 = 1

    static func encode(_ marks: [String: InputMark]) -> [UInt8] {
        var w = BinaryWriter(capacity: 8 + 64 * marks.count)
        w.byte(magic)
        w.varint(version)
        w.varint(UInt64(marks.count))
        for (input, mark) in marks { w.write(input, mark.epoch, mark.seq) }
        return w.written
    }

    static func decode(_ data: Data) throws -> [String: InputMark] {
        guard data.first == magic else { return try JSONCoding.decoder.decode([String: InputMark].self, from: data) }
        var r = BinaryReader(Array(data), from: 1)
        let version = try r.varint()
        guard version == Self.version else { throw BinaryReader.Malformed("input watermarks version \(version) is newer than this release") }
        var marks: [String: InputMark] = [:]
        let count = try r.varint()
        guard count <= UInt64(data.count) else { throw BinaryReader.Malformed("a count of \(count) input watermarks is more than is stored") }
        for _ in 0..<count {
            let input: String = try r.read()
            marks[input] = InputMark(epoch: try r.read(), seq: try r.read())
        }
        guard r.isAtEnd else { throw BinaryReader.Malformed("the input watermarks have bytes left after them") }
        return marks
    }
}

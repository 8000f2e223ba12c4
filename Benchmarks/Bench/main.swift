import Foundation

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "quality":
    try Quality.run(seeds: [1, 2, 3, 4, 5])
default:
    print("usage: tracker-bench quality|filter-core|gateway|filter")
}

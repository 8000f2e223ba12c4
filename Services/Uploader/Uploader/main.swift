import FoundationEssentials
import Glibc
import Runtime

exit(await ServiceRunner.run(name: "uploader") { context, reader in
    UploaderService.definition(try UploaderSettings(reader), topics: context.topics, clock: context.clock, logger: context.logger)
})

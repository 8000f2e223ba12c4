import Runtime

await ServiceRunner.main(name: "filter") { context, reader in
    try FilterService(context: context, settings: FilterSettings(reader))
}

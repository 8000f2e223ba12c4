#!/bin/sh
# Run once by compose (the `accounts` service, in the broker's image) before
# anything else: makes a password for every account the deployment itself
# needs, and the broker's password file, in the `accounts` volume. Existing
# passwords are kept, so restarts and upgrades change nothing; device
# accounts are added by the operator (see "Access control" in docs/operations.md).
set -eu
dir=${ACCOUNTS_DIR:-/accounts}
umask 077
touch "$dir/passwords" "$dir/operators"
for account in tracker-gateway tracker-filter tracker-motion tracker-track tracker-uploader tracker-http trackerctl tracker-map; do
  [ -s "$dir/$account" ] || head -c 18 /dev/urandom | base64 | tr -d '/+=\n' > "$dir/$account"
  secret=$(cat "$dir/$account")
  mosquitto_passwd -b "$dir/passwords" "$account" "$secret"
  # A service's output connection logs in as its twin, with the same password
  # (tracker-http has one connection of its own, so no twin). The operators'
  # listener admits trackerctl and the services (they connect there, as it
  # keeps the client ids a partitioned service names its sessions with, and
  # their health checks run trackerctl there), never a device or a page.
  case $account in
    tracker-map) ;;
    trackerctl|tracker-http) mosquitto_passwd -b "$dir/operators" "$account" "$secret" ;;
    tracker-*) mosquitto_passwd -b "$dir/passwords" "$account-out" "$secret"
               mosquitto_passwd -b "$dir/operators" "$account" "$secret"
               mosquitto_passwd -b "$dir/operators" "$account-out" "$secret" ;;
  esac
done
# The broker runs as the image's mosquitto user (uid 1883).
chown 1883:1883 "$dir/passwords" "$dir/operators" 2>/dev/null || true
echo "accounts: ready"

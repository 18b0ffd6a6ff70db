#!/usr/bin/env bash
# Pack a disk image into an OVA that VMware and VirtualBox import:
#
#   packer/ova.sh DISK OUT.ova NAME VERSION
#
# The OVA is a ustar archive holding, in this order (OVF 1.0, DSP0243 section 5.3: the
# descriptor first, then the manifest, then the files it references):
#   NAME.ovf          OVF 1.0 descriptor: 2 vCPU, 4 GiB RAM, BIOS, one LSI Logic SCSI
#                     disk, one E1000 NIC on the network "VM Network"
#   NAME.mf           SHA256 of the descriptor and of the disk
#   NAME-disk1.vmdk   the disk as a streamOptimized (compressed) VMDK
set -euo pipefail

disk=${1:?usage: ova.sh DISK OUT.ova NAME VERSION}
ova=${2:?}
name=${3:?}
version=${4:?}
work=$(mktemp -d "$(dirname "$ova")/.ova.XXXXXX")
trap 'rm -rf "$work"' EXIT

vmdk=$name-disk1.vmdk
qemu-img convert -O vmdk -o subformat=streamOptimized,adapter_type=lsilogic \
    "$disk" "$work/$vmdk"
capacity=$(qemu-img info --output=json "$disk" | python3 -c 'import json,sys; print(json.load(sys.stdin)["virtual-size"])')
vmdk_size=$(stat -c %s "$work/$vmdk")

cat >"$work/$name.ovf" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1"
          xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1"
          xmlns:rasd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData"
          xmlns:vssd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_VirtualSystemSettingData"
          xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <References>
    <File ovf:id="file1" ovf:href="$vmdk" ovf:size="$vmdk_size"/>
  </References>
  <DiskSection>
    <Info>Virtual disks</Info>
    <Disk ovf:diskId="vmdisk1" ovf:fileRef="file1" ovf:capacity="$capacity"
          ovf:format="http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized"/>
  </DiskSection>
  <NetworkSection>
    <Info>Logical networks</Info>
    <Network ovf:name="VM Network">
      <Description>The network the appliance serves NFS, SMB and iSCSI on</Description>
    </Network>
  </NetworkSection>
  <VirtualSystem ovf:id="$name">
    <Info>Cairn appliance $version: a scale-out NAS node (NFS, SMB, iSCSI)</Info>
    <Name>$name</Name>
    <OperatingSystemSection ovf:id="96">
      <Info>Guest operating system</Info>
      <Description>Debian GNU/Linux 12 (64-bit)</Description>
    </OperatingSystemSection>
    <ProductSection>
      <Info>Product</Info>
      <Product>Cairn appliance</Product>
      <Version>$version</Version>
    </ProductSection>
    <VirtualHardwareSection>
      <Info>Virtual hardware</Info>
      <System>
        <vssd:ElementName>Virtual Hardware Family</vssd:ElementName>
        <vssd:InstanceID>0</vssd:InstanceID>
        <vssd:VirtualSystemIdentifier>$name</vssd:VirtualSystemIdentifier>
        <vssd:VirtualSystemType>vmx-10 virtualbox-2.2</vssd:VirtualSystemType>
      </System>
      <Item>
        <rasd:AllocationUnits>hertz * 10^6</rasd:AllocationUnits>
        <rasd:Description>Number of virtual CPUs</rasd:Description>
        <rasd:ElementName>2 virtual CPUs</rasd:ElementName>
        <rasd:InstanceID>1</rasd:InstanceID>
        <rasd:ResourceType>3</rasd:ResourceType>
        <rasd:VirtualQuantity>2</rasd:VirtualQuantity>
      </Item>
      <Item>
        <rasd:AllocationUnits>byte * 2^20</rasd:AllocationUnits>
        <rasd:Description>Memory size</rasd:Description>
        <rasd:ElementName>4096 MB of memory</rasd:ElementName>
        <rasd:InstanceID>2</rasd:InstanceID>
        <rasd:ResourceType>4</rasd:ResourceType>
        <rasd:VirtualQuantity>4096</rasd:VirtualQuantity>
      </Item>
      <Item>
        <rasd:Address>0</rasd:Address>
        <rasd:Description>SCSI controller</rasd:Description>
        <rasd:ElementName>SCSI controller 0</rasd:ElementName>
        <rasd:InstanceID>3</rasd:InstanceID>
        <rasd:ResourceSubType>lsilogic</rasd:ResourceSubType>
        <rasd:ResourceType>6</rasd:ResourceType>
      </Item>
      <Item>
        <rasd:AddressOnParent>0</rasd:AddressOnParent>
        <rasd:ElementName>Hard disk 1</rasd:ElementName>
        <rasd:HostResource>ovf:/disk/vmdisk1</rasd:HostResource>
        <rasd:InstanceID>4</rasd:InstanceID>
        <rasd:Parent>3</rasd:Parent>
        <rasd:ResourceType>17</rasd:ResourceType>
      </Item>
      <Item>
        <rasd:AddressOnParent>7</rasd:AddressOnParent>
        <rasd:AutomaticAllocation>true</rasd:AutomaticAllocation>
        <rasd:Connection>VM Network</rasd:Connection>
        <rasd:Description>E1000 ethernet adapter on "VM Network"</rasd:Description>
        <rasd:ElementName>Network adapter 1</rasd:ElementName>
        <rasd:InstanceID>5</rasd:InstanceID>
        <rasd:ResourceSubType>E1000</rasd:ResourceSubType>
        <rasd:ResourceType>10</rasd:ResourceType>
      </Item>
    </VirtualHardwareSection>
  </VirtualSystem>
</Envelope>
EOF
python3 -c 'import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' "$work/$name.ovf"

(
    cd "$work"
    for f in "$name.ovf" "$vmdk"; do
        echo "SHA256($f)= $(sha256sum "$f" | cut -d' ' -f1)"
    done >"$name.mf"
    tar --format=ustar --owner=0 --group=0 --numeric-owner -cf "$ova.tmp" \
        "$name.ovf" "$name.mf" "$vmdk"
)
mv "$ova.tmp" "$ova"
